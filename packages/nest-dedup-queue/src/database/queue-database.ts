import type { OnApplicationShutdown } from '@nestjs/common';
import { createHash } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import type { DataSource } from 'typeorm';

/** A connection taken out of the pool for as long as its holder needs it. */
export interface DedicatedConnection {
  client: PoolClient;
  /** Returns the connection to the pool, or destroys it when given the error that broke it. */
  release(error?: Error): void;
}

/**
 * The module's access to Postgres: the TypeORM `DataSource` (the module's own or the application's) and the
 * schema its tables live in.
 *
 * NOTE: hot-path statements go straight to the DataSource's own `pg` pool, skipping TypeORM's per-query
 * QueryRunner allocation; the pool, its size and its credentials are still the DataSource's.
 */
export class QueueDatabase implements OnApplicationShutdown {
  /** The quoted schema name, ready to interpolate: `"dedup_queue"`. */
  readonly schemaSql: string;

  constructor(
    readonly dataSource: DataSource,
    readonly schema: string,
    private readonly ownsDataSource: boolean,
  ) {
    this.schemaSql = `"${schema}"`;
  }

  private get pool(): Pool {
    return (this.dataSource.driver as unknown as { master: Pool }).master;
  }

  /** The channel that wakes workers when work is enqueued into this schema; the payload is the queue name. */
  get wakeUpChannel(): string {
    return `dedup_queue:${this.schema}`;
  }

  /** The channel that tells every process a queue was paused, resumed or given new limits; the payload is its name. */
  get controlChannel(): string {
    return `dedup_queue_control:${this.schema}`;
  }

  /** The channel that tells workers to interrupt a workflow; the payload is its ID. */
  get cancelChannel(): string {
    return `dedup_queue_cancel:${this.schema}`;
  }

  /**
   * Runs one statement on a pooled connection; `prepared` statements (the hot paths) are parsed and planned once
   * per connection. NOTE: unlike `pool.query`, a statement the server refused (a unique
   * violation, a lock timeout) gives its connection back to the pool instead of destroying it; only a broken
   * connection is discarded.
   */
  async query<T = Record<string, unknown>>(sql: string, params: unknown[] = [], prepared = false): Promise<T[]> {
    const { client, release } = await this.connect();
    let broken: Error | undefined;
    try {
      const name = prepared ? statementName(sql) : undefined;
      return (await client.query({ text: sql, values: params, name })).rows as T[];
    } catch (error) {
      broken = isServerError(error) ? undefined : (error as Error);
      throw error;
    } finally {
      release(broken);
    }
  }

  /** Runs `work` inside BEGIN/COMMIT on one connection, rolling back if it throws. */
  async transaction<T>(work: (query: <R = Record<string, unknown>>(sql: string, params?: unknown[]) => Promise<R[]>) => Promise<T>): Promise<T> {
    const connection = await this.connect();
    try {
      await connection.client.query('BEGIN');
      const result = await work(async (sql, params = []) => (await connection.client.query(sql, params)).rows);
      await connection.client.query('COMMIT');
      connection.release();
      return result;
    } catch (error) {
      const rolledBack = await connection.client.query('ROLLBACK').then(() => true, () => false);
      connection.release(rolledBack ? undefined : (error as Error));
      throw error;
    }
  }

  /** Takes one connection out of the pool (for LISTEN, session advisory locks, multi-statement work). */
  async connect(): Promise<DedicatedConnection> {
    const client = await this.pool.connect();
    // NOTE: pg-pool listens for errors on idle connections only; one that breaks while checked out (the server
    // terminated it) emits 'error' with no listener and crashes the process. A broken one keeps the listener: it can
    // emit again after its release. A second release (a query's failure and the error event of one broken
    // connection, each releasing it) is ignored instead of throwing from an event handler.
    let lost: Error | undefined;
    let released = false;
    const onError = (error: Error) => (lost ??= error);
    client.on('error', onError);
    return {
      client,
      release: (error?: Error) => {
        if (released) return;
        released = true;
        if (!error && !lost) client.off('error', onError);
        client.release(error ?? lost);
      },
    };
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
}

/** An error the server sent (it has a SQLSTATE severity): the connection itself is fine. */
function isServerError(error: unknown): boolean {
  return typeof (error as { severity?: unknown } | null)?.severity === 'string';
}

const statementNames = new Map<string, string>();

/** A stable name for a prepared statement: the same SQL text gets the same name on every connection. */
function statementName(sql: string): string {
  let name = statementNames.get(sql);
  if (!name) {
    name = `dq_${createHash('sha1').update(sql).digest('hex').slice(0, 20)}`;
    statementNames.set(sql, name);
  }
  return name;
}
