import { InvalidArgumentError } from '../errors/invalid-argument.error';
import type { TransactionSql } from '../interfaces/transaction-sql.interface';

/** What `fromPg` needs of a node-postgres client: a `pg.Client`, or a `PoolClient` from `pool.connect()`. */
export interface PgTransactionClient {
  query(text: string, values: unknown[]): Promise<{ rows: unknown[] }>;
}

/**
 * The `db` of an enqueue inside a node-postgres transaction: `client` is one connection (a `Client`, or a
 * `PoolClient` from `pool.connect()`) on which the caller has sent `BEGIN` and will send `COMMIT` or `ROLLBACK`.
 *
 * ```ts
 * const client = await pool.connect();
 * await client.query('BEGIN');
 * await queues.enqueue('emails', this.tasks.send, [userId], { deduplicationId: userId, db: fromPg(client) });
 * await client.query('COMMIT');
 * ```
 * @throws InvalidArgumentError when given a `Pool` (it runs each statement on whichever connection is free)
 */
export function fromPg(client: PgTransactionClient): TransactionSql {
  if (typeof client?.query !== 'function' || 'totalCount' in client) {
    throw new InvalidArgumentError(
      'fromPg(client)',
      'must be one connection in a transaction (await pool.connect(), then BEGIN), not a Pool',
    );
  }
  return { executeSql: (text, values) => client.query(text, values) };
}
