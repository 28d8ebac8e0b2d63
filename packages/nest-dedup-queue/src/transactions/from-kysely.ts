import { randomUUID } from 'node:crypto';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import type { TransactionSql } from '../interfaces/transaction-sql.interface';

/** A statement as Kysely's `CompiledQuery.raw(sql, parameters)` makes it. */
interface KyselyRawQuery {
  readonly sql: string;
  readonly parameters: readonly unknown[];
  readonly query: { readonly kind: 'RawNode'; readonly sqlFragments: readonly string[]; readonly parameters: [] };
  readonly queryId: { readonly queryId: string };
}

/** What `fromKysely` needs of a Kysely transaction (with `PostgresDialect`). */
export interface KyselyTransaction {
  readonly isTransaction: boolean;
  withoutPlugins(): KyselyTransaction;
  executeQuery(query: KyselyRawQuery): Promise<{ rows: unknown[] }>;
}

/**
 * The `db` of an enqueue inside a Kysely transaction (`PostgresDialect`). Its statements skip the instance's plugins
 * (a `CamelCasePlugin` would rename the columns the module reads).
 *
 * ```ts
 * await db.transaction().execute(async (trx) => {
 *   await trx.insertInto('orders').values(order).execute();
 *   await queues.enqueue('fulfil', this.tasks.fulfil, [order.id], { deduplicationId: order.id, db: fromKysely(trx) });
 * });
 * ```
 * @throws InvalidArgumentError when `trx` is not a transaction (a `Kysely` instance runs each statement on any
 *   connection)
 */
export function fromKysely(trx: KyselyTransaction): TransactionSql {
  if (typeof trx?.executeQuery !== 'function' || trx.isTransaction !== true) {
    throw new InvalidArgumentError(
      'fromKysely(trx)',
      'must be a Kysely transaction (db.transaction().execute(async (trx) => ...)), not the Kysely instance',
    );
  }
  const plain = trx.withoutPlugins();
  return {
    executeSql: async (text, values) =>
      plain.executeQuery({
        sql: text,
        parameters: values,
        query: { kind: 'RawNode', sqlFragments: [text], parameters: [] },
        queryId: { queryId: randomUUID() },
      }),
  };
}
