import { InvalidArgumentError } from '../errors/invalid-argument.error';
import type { TransactionSql } from '../interfaces/transaction-sql.interface';

/** What `fromKnex` needs of a Knex transaction (on the `pg` client). */
export interface KnexTransaction {
  readonly isTransaction?: boolean;
  raw(sql: string, bindings: readonly unknown[]): PromiseLike<{ rows: unknown[] }>;
}

/**
 * The `db` of an enqueue inside a Knex transaction (Knex on PostgreSQL, client `pg`):
 *
 * ```ts
 * await knex.transaction(async (trx) => {
 *   await trx('orders').insert(order);
 *   await queues.enqueue('fulfil', this.tasks.fulfil, [order.id], { deduplicationId: order.id, db: fromKnex(trx) });
 * });
 * ```
 * @throws InvalidArgumentError when `trx` is not a transaction (`knex` itself runs each statement on any connection)
 */
export function fromKnex(trx: KnexTransaction): TransactionSql {
  if (typeof trx?.raw !== 'function' || trx.isTransaction !== true) {
    throw new InvalidArgumentError(
      'fromKnex(trx)',
      'must be a Knex transaction (knex.transaction(async (trx) => ...)), not the knex instance',
    );
  }
  return {
    executeSql: async (text, values) => {
      const bindings: unknown[] = [];
      // NOTE: Knex binds `?` placeholders (and reads `\?` as a literal question mark), not `$1`.
      const sql = text.replace(/\?|\$(\d+)/g, (match, position?: string) => {
        if (position === undefined) return '\\?';
        bindings.push(values[Number(position) - 1]);
        return '?';
      });
      return trx.raw(sql, bindings);
    },
  };
}
