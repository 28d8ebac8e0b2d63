import type { EntityManager } from 'typeorm';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import type { TransactionSql } from '../interfaces/transaction-sql.interface';

/** `EnqueueOptions.manager`, a TypeORM transaction, as the `TransactionSql` that every caller's transaction is. */
export function fromEntityManager(manager: EntityManager, field: string): TransactionSql {
  const runner = manager?.queryRunner;
  if (!runner?.isTransactionActive) {
    throw new InvalidArgumentError(
      field,
      'must be the EntityManager of a running transaction (dataSource.transaction(async (manager) => ...))',
    );
  }
  return {
    // NOTE: structured results: TypeORM's plain query() answers an UPDATE with [rows, count] instead of rows.
    executeSql: async (text, values) => ({ rows: (await runner.query(text, values, true)).records }),
  };
}
