/**
 * The caller's open transaction, as `EnqueueOptions.db` takes it: one method that runs a statement on the
 * transaction's connection. `fromPg`, `fromKnex`, `fromKysely`, `fromDrizzle` and `fromPrisma` build one from each
 * library's transaction object; any other driver can implement it in a few lines.
 *
 * The workflow is then written in that transaction: it exists only if the caller commits, and workers are woken by
 * the commit. A duplicate does not abort the transaction: the insert runs under a savepoint (or `ON CONFLICT`).
 */
export interface TransactionSql {
  /**
   * Runs `text` with its `$1`, `$2`, ... parameters bound to `values`, in the caller's transaction, and resolves
   * with the rows it returned (column names as Postgres gave them). Rejects with the database's error, carrying
   * Postgres's SQLSTATE `code` and `constraint` as node-postgres's errors do (the module recognises a duplicate by
   * them).
   */
  executeSql(text: string, values: unknown[]): Promise<{ rows: unknown[] }>;
}
