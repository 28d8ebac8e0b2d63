import { OnApplicationShutdown } from '@nestjs/common';
import { createHash } from 'node:crypto';
import { Client, Pool, PoolClient } from 'pg';
import type { DataSource, EntityManager } from 'typeorm';
import { DatabaseQueryError } from '../../errors/database-query.error';
import { DatabaseUnavailableError } from '../../errors/database-unavailable.error';
import { DedupQueueError } from '../../errors/dedup-queue.error';
import { DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_INPUT_LIMITS } from '../../dedup-queue.constants';
import type { InputLimits } from '../../interfaces/input-limits.interface';
import { ConnectionMonitor } from './connection-monitor';
import { CANCEL_CHANNEL_PREFIX, CONTROL_CHANNEL_PREFIX, WAKE_UP_CHANNEL_PREFIX } from './notification-channels';
import { DatabaseEndpoint, EndpointSettings, describeEndpoint } from '../../utils/database-endpoint';
import { describeError } from '../../utils/describe-error';
import { driverErrorOf, ErrorPhase, isConnectionFailure, isServerError } from './sql-errors';
import { ModuleLogger } from '../../utils/module-logger';
import { RowsBeforeCommitQuery } from './rows-before-commit.query';

/**
 * What the module uses of a `pg` client (`PoolClient` or `Client`). NOTE: declared here rather than imported from
 * `pg`, so that the package's declarations compile in an application without `@types/pg`.
 */
export interface PgConnection {
  query<R = Record<string, unknown>>(
    statement: string | { text: string; values?: unknown[]; name?: string; types?: PgTypeParsers },
    values?: unknown[],
  ): Promise<{ rows: R[] }>;
  /** A statement that reads its own replies (`RowsBeforeCommitQuery`). */
  query(submittable: { submit: (connection: never) => unknown }): unknown;
  on(event: 'notification', listener: (message: PgNotification) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  off(event: 'notification', listener: (message: PgNotification) => void): unknown;
  off(event: 'error', listener: (error: Error) => void): unknown;
  off(event: 'end', listener: () => void): unknown;
}

/** How `pg` reads a column's text (its `types` option). */
export interface PgTypeParsers {
  getTypeParser(oid: number, format?: string): (value: string) => unknown;
}

/** Every column as the text Postgres sent: a value read this way goes back into a statement unchanged. */
const AS_SENT: PgTypeParsers = { getTypeParser: () => (value: string) => value };

/** A NOTIFY received on a LISTEN connection. */
export interface PgNotification {
  channel: string;
  payload?: string;
}

/** A connection taken out of the pool (or opened on its own) for as long as its holder needs it. */
export interface DedicatedConnection {
  client: PgConnection;
  /** Gives the connection back (or closes it), destroying it when given the error that broke it. Idempotent. */
  release(error?: Error): void;
}

export interface QueryOptions {
  /** Hot-path statement: parsed and planned once per connection (unless behind a transaction pooler). */
  prepared?: boolean;
  /** Safe to send again when the connection broke mid-statement (a read, or a write keyed by workflow ID). */
  idempotent?: boolean;
  /**
   * Every column read as the text Postgres sent (a time to the microsecond, JSON as stored), for values that go back
   * into a statement unchanged.
   */
  asSent?: boolean;
}

/** How the module reaches Postgres, as configured. */
export interface ConnectionSettings {
  endpoint: DatabaseEndpoint;
  /** False behind a transaction pooler (PgBouncer `pool_mode = transaction`): named statements would leak. */
  preparedStatements: boolean;
  connectTimeoutMs: number;
  /** `'citus'`: the server is a Citus coordinator and the tables are distributed (default `'single'`). */
  distribution?: 'single' | 'citus';
  /** What callers may store (`forRoot({ inputLimits })`, resolved); default `DEFAULT_INPUT_LIMITS`. */
  inputLimits?: Required<InputLimits>;
}

const RETRY_DELAY_MS = 100;
const GUARDED = Symbol('nest-dedup-queue: pool connections guarded');

/** A statement sent on some connection or in some transaction, by its text and parameters. */
export type Query = <R = Record<string, unknown>>(sql: string, params?: unknown[]) => Promise<R[]>;

/**
 * A statement of a transaction; `options.prepared` and `asSent` as for `QueueDatabase.query` (`idempotent` has no use
 * there).
 */
export type TransactionQuery = <R = Record<string, unknown>>(
  sql: string,
  params?: unknown[],
  options?: Pick<QueryOptions, 'prepared' | 'asSent'>,
) => Promise<R[]>;

/**
 * The module's access to Postgres: the TypeORM `DataSource` (the module's own or the application's) and the
 * schema its tables live in. Every failure to reach the server, a connection the server refuses for now (see
 * `isConnectionFailure`), or a connection that breaks under a statement, comes out as `DatabaseUnavailableError`
 * (and is reported to the monitor, which logs outages); statements the server refused come out as
 * `DatabaseQueryError`. A statement that never reached the server is sent once more.
 *
 * NOTE: hot-path statements go straight to the DataSource's own `pg` pool, skipping TypeORM's per-query
 * QueryRunner allocation; the pool, its size and its credentials are still the DataSource's.
 */
export class QueueDatabase implements OnApplicationShutdown {
  /** The quoted schema name, ready to interpolate: `"dedup_queue"`. */
  readonly schemaSql: string;

  readonly monitor: ConnectionMonitor;
  readonly settings: ConnectionSettings;
  /**
   * The Citus group of the node this connects to when it is a worker node of a Citus cluster (set at boot), else
   * undefined. A worker node runs no DDL: migrations, distribution and the daily partitions are left to an instance
   * on the coordinator.
   */
  citusWorkerGroup?: number;

  constructor(
    readonly dataSource: DataSource,
    readonly schema: string,
    private readonly ownsDataSource: boolean,
    settings?: ConnectionSettings,
  ) {
    this.schemaSql = `"${schema}"`;
    this.settings = settings ?? {
      endpoint: describeEndpoint(dataSource.options as EndpointSettings),
      preparedStatements: true,
      connectTimeoutMs: DEFAULT_CONNECT_TIMEOUT_MS,
    };
    const label = this.settings.endpoint.label;
    this.monitor = new ConnectionMonitor(new ModuleLogger('DedupQueueModule'), {
      lost: (reason) =>
        `Postgres at ${label} is unreachable (${reason}); enqueues fail with DatabaseUnavailableError and ` +
        `workers retry until it is back`,
      back: (seconds) => `Postgres at ${label} is reachable again after ${seconds} s`,
    });
  }

  private get pool(): Pool {
    return (this.dataSource.driver as unknown as { master: Pool }).master;
  }

  /**
   * Whether the tables are distributed on a Citus cluster (`forRoot({ distribution: 'citus' })`): statements that
   * Citus would refuse or send to every node take their routable form (see docs/citus.md).
   */
  get citus(): boolean {
    return this.settings.distribution === 'citus';
  }

  /** The channel that wakes workers when work is enqueued into this schema; the payload is the queue name. */
  get wakeUpChannel(): string {
    return `${WAKE_UP_CHANNEL_PREFIX}${this.schema}`;
  }

  /** The channel that tells every process a queue was paused, resumed or given new limits; the payload is its name. */
  get controlChannel(): string {
    return `${CONTROL_CHANNEL_PREFIX}${this.schema}`;
  }

  /** The limits of what callers store in this schema (arguments, messages, events, results, keys). */
  get inputLimits(): Required<InputLimits> {
    return this.settings.inputLimits ?? DEFAULT_INPUT_LIMITS;
  }

  /** The channel that tells workers to interrupt a workflow; the payload is its ID. */
  get cancelChannel(): string {
    return `${CANCEL_CHANNEL_PREFIX}${this.schema}`;
  }

  /**
   * Runs one statement on a pooled connection. NOTE: unlike `pool.query`, a statement the server refused (a unique
   * violation, a lock timeout) gives its connection back to the pool instead of destroying it; only a broken
   * connection is discarded.
   */
  async query<T = Record<string, unknown>>(
    sql: string,
    params: unknown[] = [],
    options: QueryOptions = {},
  ): Promise<T[]> {
    const statement = statementOf(sql, params, this.preparedName(sql, options), options);
    return this.runStatement(
      async (client) => (await client.query(statement)).rows as T[],
      () => options.idempotent === true,
    );
  }

  /**
   * Runs one statement as `query` does and hands its rows to `beforeCommit` as soon as the server has sent them,
   * before the statement's commit (and the flush that makes it durable) is done; the promise still settles after the
   * commit. NOTE: once `beforeCommit` has had the rows, a connection that breaks is not sent the statement again
   * (what was handed over would be decided twice).
   */
  async queryWithRowsBeforeCommit<T = Record<string, unknown>>(
    sql: string,
    params: unknown[],
    options: QueryOptions,
    beforeCommit: (rows: T[]) => void,
  ): Promise<T[]> {
    const statement = statementOf(sql, params, this.preparedName(sql, options), options);
    let handedOver = false;
    const handOver = (rows: T[]) => {
      handedOver = true;
      beforeCommit(rows);
    };
    return this.runStatement(
      (client) =>
        new Promise<T[]>((resolve, reject) => {
          client.query(
            new RowsBeforeCommitQuery<T>(statement, handOver, (error, rows) => (error ? reject(error) : resolve(rows))),
          );
        }),
      () => options.idempotent === true && !handedOver,
    );
  }

  /**
   * Sends a statement (`send`) on a pooled connection: a statement the server refused gives its connection back; a
   * broken connection is discarded, and the statement sent once more when it never reached the server or
   * `mayResend()` says so.
   */
  private async runStatement<T>(send: (client: PgConnection) => Promise<T>, mayResend: () => boolean): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      let sent = false;
      try {
        const connection = await this.checkOut();
        try {
          sent = true;
          const result = await send(connection.client);
          connection.release();
          this.monitor.succeeded();
          return result;
        } catch (error) {
          connection.release(keepsConnection(error) ? undefined : (error as Error));
          throw error;
        }
      } catch (error) {
        const phase: ErrorPhase = sent ? 'statement' : 'connect';
        if (!isConnectionFailure(error, phase)) throw this.classify(error, phase);
        const retry = attempt === 1 && this.monitor.reachable && (!sent || mayResend());
        this.monitor.failed(error);
        if (!retry) throw this.unavailable(error);
        await delay(RETRY_DELAY_MS);
      }
    }
  }

  /** Runs `work` inside BEGIN/COMMIT on one connection, rolling back if it throws. */
  async transaction<T>(work: (query: TransactionQuery) => Promise<T>): Promise<T> {
    const connection = await this.connect();
    try {
      await connection.client.query('BEGIN');
      const query: TransactionQuery = async <R>(sql: string, params: unknown[] = [], options: QueryOptions = {}) =>
        (await connection.client.query<R>(statementOf(sql, params, this.preparedName(sql, options), options))).rows;
      const result = await work(query);
      await connection.client.query('COMMIT');
      connection.release();
      this.monitor.succeeded();
      return result;
    } catch (error) {
      const rolledBack = await connection.client.query('ROLLBACK').then(
        () => true,
        () => false,
      );
      connection.release(rolledBack && keepsConnection(error) ? undefined : (error as Error));
      throw this.classify(error);
    }
  }

  /** The name to prepare a hot-path statement under, unless prepared statements are off (a transaction pooler). */
  private preparedName(sql: string, options: Pick<QueryOptions, 'prepared'>): string | undefined {
    return options.prepared && this.settings.preparedStatements ? statementName(sql) : undefined;
  }

  /**
   * Runs `work` in a transaction of the DataSource, for work that needs TypeORM's `EntityManager`; its errors come
   * out as those of `transaction`.
   */
  async managerTransaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    const runner = this.dataSource.createQueryRunner();
    try {
      await runner.connect();
    } catch (error) {
      await runner.release().catch(() => undefined);
      throw this.classify(error, 'connect');
    }
    try {
      const result = await runner.manager.transaction(work);
      this.monitor.succeeded();
      return result;
    } catch (error) {
      throw this.classify(error);
    } finally {
      await runner.release().catch(() => undefined);
    }
  }

  /**
   * Takes one connection out of the pool (for session advisory locks, multi-statement work). It has an `error`
   * listener while checked out, so a connection lost between statements never crashes the process.
   */
  async connect(): Promise<DedicatedConnection> {
    try {
      return await this.checkOut();
    } catch (error) {
      throw this.classify(error, 'connect');
    }
  }

  /** Opens a connection of its own to `url`, outside the pool: a direct connection past a pooler, for LISTEN. */
  async connectOutsidePool(url: string): Promise<DedicatedConnection> {
    return this.openOutsidePool({ connectionString: url });
  }

  /**
   * Opens a connection of its own to another node of a Citus cluster, for LISTEN: the settings of `url` (the direct
   * `listen.url`) or else of the pool (user, password, database, TLS), with the node's host and port.
   */
  async connectToNode(node: { host: string; port: number }, url?: string): Promise<DedicatedConnection> {
    const { connectionString, ...poolSettings } = (url ? { connectionString: url } : this.pool.options) as {
      connectionString?: string;
    } & Record<string, unknown>;
    const settings: Record<string, unknown> = { ...poolSettings, host: node.host, port: node.port };
    if (connectionString) {
      const nodeUrl = new URL(connectionString);
      nodeUrl.hostname = node.host;
      nodeUrl.port = String(node.port);
      settings.connectionString = nodeUrl.toString();
    }
    return this.openOutsidePool(settings);
  }

  private async openOutsidePool(settings: Record<string, unknown>): Promise<DedicatedConnection> {
    const client = new Client({
      ...settings,
      connectionTimeoutMillis: this.settings.connectTimeoutMs,
      application_name: 'nest-dedup-queue',
    });
    const onError = () => undefined;
    client.on('error', onError);
    try {
      await client.connect();
    } catch (error) {
      void client.end().catch(onError);
      throw this.classify(error, 'connect');
    }
    let released = false;
    return {
      client,
      release: () => {
        if (released) return;
        released = true;
        void client.end().catch(onError);
      },
    };
  }

  /**
   * Gives every connection of the pool, present and future, an `error` listener for its whole life. NOTE: pg-pool
   * removes its idle listener when it hands a client to a waiting `connect()`, and an error read in the same chunk
   * as the login (a backend terminated at once) is emitted before the caller can add one of its own.
   */
  guardPoolConnections(): void {
    const pool = this.pool as Pool & { _clients?: PoolClient[]; [GUARDED]?: true };
    if (pool[GUARDED]) return;
    pool[GUARDED] = true;
    const ignore = () => undefined;
    pool.on('connect', (client) => client.on('error', ignore));
    for (const client of pool._clients ?? []) client.on('error', ignore);
  }

  /**
   * The error as a caller should see it: connection failures become `DatabaseUnavailableError`, other refusals of
   * the server `DatabaseQueryError` (whose SQLSTATE and constraint the module's own checks still read); anything
   * else is left as it is. `phase`: whether it arose opening a connection or under a statement.
   */
  classify(error: unknown, phase: ErrorPhase = 'statement'): unknown {
    if (isConnectionFailure(error, phase)) {
      this.monitor.failed(error);
      return this.unavailable(error);
    }
    if (isServerError(error) && !(error instanceof DedupQueueError))
      return new DatabaseQueryError(driverErrorOf(error));
    return error;
  }

  async onApplicationShutdown(): Promise<void> {
    await this.close();
  }

  /** Destroys the DataSource if the module created it; an application's DataSource is left open. */
  async close(): Promise<void> {
    if (this.ownsDataSource && this.dataSource.isInitialized) {
      await this.dataSource.destroy();
    }
  }

  private async checkOut(): Promise<DedicatedConnection> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    const onError = (error: Error) => (broken = error);
    client.on('error', onError);
    let released = false;
    return {
      client,
      release: (error?: Error) => {
        if (released) return;
        released = true;
        client.off('error', onError);
        client.release(error ?? broken);
      },
    };
  }

  private unavailable(error: unknown): DatabaseUnavailableError {
    if (error instanceof DatabaseUnavailableError) return error;
    return new DatabaseUnavailableError(
      `Postgres at ${this.settings.endpoint.label} is unavailable: ${describeError(error)}`,
      error,
    );
  }
}

/** A refused statement leaves its connection usable; a broken connection (or a read-only server) does not. */
function keepsConnection(error: unknown): boolean {
  return isServerError(error) && !isConnectionFailure(error);
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

const statementNames = new Map<string, string>();

/** The statement `pg` sends: its text, values, prepared name and, with `asSent`, the parsers that keep the text. */
function statementOf(sql: string, values: unknown[], name: string | undefined, options: QueryOptions) {
  return { text: sql, values, name, ...(options.asSent ? { types: AS_SENT } : {}) };
}

/** A stable name for a prepared statement: the same SQL text gets the same name on every connection. */
function statementName(sql: string): string {
  let name = statementNames.get(sql);
  if (!name) {
    name = `dq_${createHash('sha1').update(sql).digest('hex').slice(0, 20)}`;
    statementNames.set(sql, name);
  }
  return name;
}
