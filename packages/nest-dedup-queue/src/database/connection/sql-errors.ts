import { DatabaseQueryError } from '../../errors/database-query.error';
import { DatabaseUnavailableError } from '../../errors/database-unavailable.error';

/** The Postgres error fields the module looks at (pg's DatabaseError, or TypeORM's QueryFailedError copying them). */
interface PostgresErrorFields {
  code?: string;
  constraint?: string;
  severity?: string;
  message?: string;
  driverError?: unknown;
}

const UNIQUE_VIOLATION = '23505';
export const READ_ONLY_TRANSACTION = '25006';

/**
 * Where an error arose: while a connection was being opened (the server refused the session), or under a statement
 * on a connection that was open. Some SQLSTATEs mean "not now" only in the first place.
 */
export type ErrorPhase = 'connect' | 'statement';

/** A SQLSTATE (five characters) or a class of them (its first two), and when it means an outage. */
interface UnavailableRule {
  sqlstate: string;
  /** `'connect'`: only when the server refused to open the session; `'any'`: whenever it is raised. */
  at: 'connect' | 'any';
  /** Only when the server's message matches (English messages only). */
  message?: RegExp;
}

/**
 * The server errors that mean "not now" rather than "not this": Postgres cannot serve the module at the moment and
 * the same call, tried again later, can succeed without anyone changing it. This table is the one definition of the
 * rule: a match is a `DatabaseUnavailableError` for every caller (503 with `Retry-After` through
 * `DedupExceptionFilter`; workers back off and resume; boot tries again `retryAttempts` times), any other server
 * error a `DatabaseQueryError` (at boot a `DedupQueueConfigurationError`).
 *
 * - class `08` (connection exception), any time: the connection could not be made or broke.
 * - `57P01` admin_shutdown, `57P02` crash_shutdown, `57P05` idle_session_timeout, any time: the session was ended
 *   (`pg_terminate_backend`, a shutdown, another backend's crash, an idle pooled connection); a new one works.
 * - `57P03` cannot_connect_now, any time: the server is starting up, shutting down or in recovery.
 * - `53300` too_many_connections, any time: `max_connections`, the slots reserved for superusers, or a database's
 *   or role's `CONNECTION LIMIT` is reached; a slot frees when another session ends.
 * - class `53` (insufficient resources: memory, disk, a configuration limit) at connect: the server could not
 *   start a backend for us. Under a statement (a full disk under an insert) it stays that statement's refusal.
 * - `55000` object_not_in_prerequisite_state at connect: the database is not currently accepting connections
 *   (`ALTER DATABASE ... ALLOW_CONNECTIONS false`, as during maintenance). Under a statement the same code means
 *   something else (a sequence's `currval` not yet defined, pending trigger events) and is a refusal. NOTE:
 *   Postgres 16+ also answers 55000 at connect for a database left invalid by an interrupted `DROP DATABASE`; only
 *   the (translated) message tells it apart, so it counts as an outage too.
 * - `55000` "recovery is in progress", and `25006` read_only_sql_transaction, any time: a standby (or a primary
 *   demoted by a failover) behind the endpoint, until the endpoint reaches the new primary.
 *
 * - Citus, from the coordinator, when a worker node holding the statement's shard is down: `08006` "connection to
 *   the remote node ... failed" (class `08` above), or `XX000` "failure on connection marked as essential" (a
 *   connection to the node that the session had already used broke).
 *
 * Not listed, because trying again does not cure them: `3D000` (no such database), class `28` (authentication
 * failed, a role that may not log in), `57P04` (database dropped).
 */
const UNAVAILABLE_RULES: readonly UnavailableRule[] = [
  { sqlstate: '08', at: 'any' },
  { sqlstate: '57P01', at: 'any' },
  { sqlstate: '57P02', at: 'any' },
  { sqlstate: '57P05', at: 'any' },
  { sqlstate: '57P03', at: 'any' },
  { sqlstate: '53300', at: 'any' },
  { sqlstate: '53', at: 'connect' },
  { sqlstate: '55000', at: 'connect' },
  { sqlstate: '55000', at: 'any', message: /recovery/i },
  { sqlstate: READ_ONLY_TRANSACTION, at: 'any' },
  { sqlstate: 'XX000', at: 'any', message: /failure on connection marked as essential/i },
];

/** Socket-level failures (Node's error codes). */
const SOCKET_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/** node-postgres's own messages for a connection that broke, timed out or was closed. */
const DRIVER_CONNECTION_MESSAGES =
  /Connection terminated|timeout exceeded when trying to connect|connection timeout|not queryable|Cannot use a pool after calling end|Client was closed/i;

/**
 * Whether `error` is a unique violation (SQLSTATE 23505) on the named index or constraint. NOTE: on Citus the
 * violation is raised on a worker, on the shard's copy of the index (`<name>_<shard id>`), and the coordinator
 * passes it on with an empty `constraint` field: the index is then read from the message.
 */
export function isUniqueViolationOn(error: unknown, constraint: string): boolean {
  const fields = postgresFields(error);
  if (fields?.code !== UNIQUE_VIOLATION) return false;
  if (fields.constraint) return fields.constraint === constraint;
  const index = /unique constraint "([^"]+)"/.exec(fields.message ?? '')?.[1];
  return index === constraint || (index !== undefined && new RegExp(`^${constraint}_\\d+$`).test(index));
}

/** An error the server sent about the statement (it has a severity): the connection itself may be fine. */
export function isServerError(error: unknown): boolean {
  return typeof postgresFields(error)?.severity === 'string';
}

/**
 * Whether `error` means that the database could not be reached or the connection broke (as opposed to the server
 * refusing a statement): socket errors, the driver's connection errors, and the server errors of
 * `UNAVAILABLE_RULES` for the `phase` the error arose in.
 */
export function isConnectionFailure(error: unknown, phase: ErrorPhase = 'statement'): boolean {
  if (error instanceof DatabaseUnavailableError) return true;
  const fields = postgresFields(error);
  if (!fields) return false;
  const code = fields.code;
  if (typeof code === 'string' && (SOCKET_ERROR_CODES.has(code) || isUnavailableSqlstate(code, fields, phase)))
    return true;
  return !isServerError(fields) && DRIVER_CONNECTION_MESSAGES.test(fields.message ?? '');
}

/** The driver's error behind TypeORM's QueryFailedError or the module's DatabaseQueryError, or the error itself. */
export function driverErrorOf(error: unknown): unknown {
  if (error instanceof DatabaseQueryError) return error.cause;
  const inner = (error as PostgresErrorFields | null)?.driverError;
  return inner && typeof inner === 'object' ? inner : error;
}

function postgresFields(error: unknown): PostgresErrorFields | undefined {
  const inner = driverErrorOf(error);
  return inner !== null && typeof inner === 'object' ? inner : undefined;
}

/** Whether `error` is a lock wait that ran past `lock_timeout` (SQLSTATE 55P03). */
export function isLockTimeout(error: unknown): boolean {
  return postgresFields(error)?.code === '55P03';
}

function isUnavailableSqlstate(code: string, fields: PostgresErrorFields, phase: ErrorPhase): boolean {
  return UNAVAILABLE_RULES.some(
    (rule) =>
      (rule.sqlstate.length === 2 ? code.startsWith(rule.sqlstate) : code === rule.sqlstate) &&
      (rule.at === 'any' || rule.at === phase) &&
      (!rule.message || rule.message.test(fields.message ?? '')),
  );
}

/** Postgres chose this statement as a deadlock victim (SQLSTATE 40P01): nothing of it was written. */
export function isDeadlock(error: unknown): boolean {
  return (driverErrorOf(error) as { code?: string } | null)?.code === '40P01';
}
