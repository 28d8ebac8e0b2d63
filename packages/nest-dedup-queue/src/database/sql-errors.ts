import { DatabaseQueryError } from '../errors/database-query.error';
import { DatabaseUnavailableError } from '../errors/database-unavailable.error';

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

/** SQLSTATEs that say the server cannot serve us now, rather than that it refused the statement. */
const UNAVAILABLE_SQLSTATES = new Set([
  '57P01', // admin_shutdown: terminated by pg_terminate_backend or a fast shutdown
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now: starting up, shutting down, in recovery
  '53300', // too_many_connections
  READ_ONLY_TRANSACTION, // a standby (or a primary demoted by a failover) behind the endpoint
]);

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

/** Whether `error` is a unique violation (SQLSTATE 23505) on the named index or constraint. */
export function isUniqueViolationOn(error: unknown, constraint: string): boolean {
  const fields = postgresFields(error);
  return fields?.code === UNIQUE_VIOLATION && fields.constraint === constraint;
}

/** An error the server sent about the statement (it has a severity): the connection itself may be fine. */
export function isServerError(error: unknown): boolean {
  return typeof postgresFields(error)?.severity === 'string';
}

/**
 * Whether `error` means that the database could not be reached or the connection broke (as opposed to the server
 * refusing a statement): socket errors, the driver's connection errors, SQLSTATE class 08, shutdowns and
 * restarts (57P01-57P03), too many connections, and a read-only server where a primary was expected (25006).
 */
export function isConnectionFailure(error: unknown): boolean {
  if (error instanceof DatabaseUnavailableError) return true;
  const fields = postgresFields(error);
  if (!fields) return false;
  const code = fields.code;
  if (typeof code === 'string') {
    if (SOCKET_ERROR_CODES.has(code) || UNAVAILABLE_SQLSTATES.has(code) || code.startsWith('08')) return true;
    if (code === '55000' && /recovery/i.test(fields.message ?? '')) return true;
  }
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
