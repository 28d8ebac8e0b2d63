import type { EntityManager } from 'typeorm';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import type { TransactionSql } from '../interfaces/transaction-sql.interface';
import { fromEntityManager } from './from-entity-manager';

/**
 * The caller's transaction of an enqueue, `db` or `manager`, as the one `TransactionSql` the module writes through;
 * undefined when the enqueue has none. `field` names the options object in errors.
 */
export function callerTransaction(
  options: { db?: TransactionSql; manager?: EntityManager },
  field: string,
): TransactionSql | undefined {
  const { db, manager } = options;
  if (db !== undefined && manager !== undefined) {
    throw new InvalidArgumentError(field, 'give db or manager, not both: they name the same transaction');
  }
  if (manager !== undefined) return fromEntityManager(manager, `${field}.manager`);
  if (db === undefined) return undefined;
  if (typeof db?.executeSql !== 'function') {
    throw new InvalidArgumentError(
      `${field}.db`,
      "must have executeSql(text, values) running in the caller's transaction " +
        '(fromPg, fromKnex, fromKysely, fromDrizzle or fromPrisma builds one)',
    );
  }
  return db;
}
