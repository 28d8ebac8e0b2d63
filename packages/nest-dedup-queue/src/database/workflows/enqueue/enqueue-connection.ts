import type { TransactionSql } from '../../../interfaces/transaction-sql.interface';
import type { Query, QueueDatabase } from '../../connection/queue-database';
import { InsertStatements, insertStatements } from './workflow-insert.statements';
import { WorkflowTables, workflowTables } from '../../tables/workflow-tables';

/** A class of enqueue statements: each keeps `EnqueueConnection`'s constructor (see `inTransaction`). */
type EnqueueConnectionClass<T> = new (database: QueueDatabase, query: Query, savepoints: boolean) => T;

const statementsBySchema = new Map<string, InsertStatements>();

/**
 * Where the statements of enqueueing run (`WorkflowInserter`, `KeyHolderStore`, `DuplicatePolicyStore`): on the
 * module's pool, or with `inTransaction` in a caller's transaction, where each write runs under a savepoint
 * (`guarded`) so that a duplicate does not abort the caller's transaction.
 */
export abstract class EnqueueConnection {
  protected readonly tables: WorkflowTables;
  protected readonly table: string;

  constructor(
    protected readonly database: QueueDatabase,
    protected readonly query: Query = (sql, params) =>
      database.query(sql, params, { prepared: true, idempotent: true }),
    protected readonly savepoints = false,
  ) {
    this.tables = workflowTables(database.schemaSql);
    this.table = this.tables.active;
  }

  /** The same statements, run inside the caller's transaction `db`. */
  inTransaction(db: TransactionSql): this {
    const query: Query = async <R>(sql: string, params: unknown[] = []) => {
      try {
        return (await db.executeSql(sql, params)).rows as R[];
      } catch (error) {
        throw this.database.classify(error);
      }
    };
    return new (this.constructor as EnqueueConnectionClass<this>)(this.database, query, true);
  }

  /** Runs `statement` under a savepoint in a caller's transaction (so that its failure does not abort it). */
  protected async guarded<T>(statement: () => Promise<T>): Promise<T> {
    if (!this.savepoints) return statement();
    await this.query('SAVEPOINT dedup_queue_enqueue');
    try {
      const result = await statement();
      await this.query('RELEASE SAVEPOINT dedup_queue_enqueue');
      return result;
    } catch (error) {
      await this.query('ROLLBACK TO SAVEPOINT dedup_queue_enqueue');
      throw error;
    }
  }

  /**
   * Runs `work` so that its statements commit together: as they are in a caller's transaction (or in one `query`
   * already runs in), or on one server (each of its writes is one statement); on Citus, where a new row and its ready
   * row are two router statements, in a transaction of its own.
   */
  protected atomically<T>(query: Query, work: (query: Query) => Promise<T>): Promise<T> {
    if (this.savepoints || query !== this.query || !this.database.citus) return work(query);
    return this.database.transaction((inTransaction) =>
      work((sql, params) => inTransaction(sql, params, { prepared: true })),
    );
  }

  private get cacheKey(): string {
    return `${this.database.citus ? 'citus:' : ''}${this.table}`;
  }

  /** The insert statements of this schema, built once per process. */
  protected get statements(): InsertStatements {
    let statements = statementsBySchema.get(this.cacheKey);
    if (!statements)
      statementsBySchema.set(this.cacheKey, (statements = insertStatements(this.tables, this.database.citus)));
    return statements;
  }
}
