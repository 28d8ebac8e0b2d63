import { InvalidArgumentError } from '../errors/invalid-argument.error';
import type { TransactionSql } from '../interfaces/transaction-sql.interface';

/** A statement as Drizzle's `execute` takes it: something whose `getSQL()` builds to text and parameters. */
interface DrizzleStatement {
  getSQL(): { toQuery(config: unknown): { sql: string; params: unknown[] } };
}

/** What `fromDrizzle` needs of a Drizzle transaction (`drizzle-orm/node-postgres` or `drizzle-orm/postgres-js`). */
export interface DrizzleTransaction {
  execute(query: DrizzleStatement | string): PromiseLike<unknown>;
  rollback(): unknown;
}

/**
 * The `db` of an enqueue inside a Drizzle transaction on PostgreSQL (node-postgres or postgres-js driver):
 *
 * ```ts
 * await db.transaction(async (tx) => {
 *   await tx.insert(orders).values(order);
 *   await queues.enqueue('fulfil', this.tasks.fulfil, [order.id], { deduplicationId: order.id, db: fromDrizzle(tx) });
 * });
 * ```
 * @throws InvalidArgumentError when `tx` is not a transaction (the database object runs each statement on any
 *   connection)
 */
export function fromDrizzle(tx: DrizzleTransaction): TransactionSql {
  if (typeof tx?.execute !== 'function' || typeof tx.rollback !== 'function') {
    throw new InvalidArgumentError(
      'fromDrizzle(tx)',
      'must be a Drizzle transaction (db.transaction(async (tx) => ...)), not the database object',
    );
  }
  return {
    executeSql: async (text, values) => {
      const statement: DrizzleStatement = { getSQL: () => ({ toQuery: () => ({ sql: text, params: values }) }) };
      try {
        const result = await tx.execute(statement);
        // node-postgres answers with a result object, postgres-js with the rows themselves.
        return { rows: Array.isArray(result) ? result : (result as { rows: unknown[] }).rows };
      } catch (error) {
        // Drizzle wraps the driver's error (DrizzleQueryError); the Postgres fields are on its cause.
        const cause = (error as { cause?: { code?: unknown } } | null)?.cause;
        throw typeof cause?.code === 'string' ? cause : error;
      }
    },
  };
}
