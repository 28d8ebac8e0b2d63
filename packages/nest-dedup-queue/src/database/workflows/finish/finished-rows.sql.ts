import { WORKFLOW_COLUMNS, WORKFLOW_COLUMN_LIST, WorkflowColumn } from '../../tables/workflow-tables';
import { nowPlusMsSql } from '../../connection/time.sql';

/** A workflow row of one queue as read with `asSent`: each shared column's text as Postgres sent it (or null). */
export type RowAsSent = Record<WorkflowColumn, string | null>;

/** A column's new value: text sent as a parameter (null: NULL), the statement's `now()`, or `now()` plus milliseconds. */
export type FinishedValue = string | number | null | typeof NOW | { msFromNow: number };

/** The statement's `now()` (on Citus the coordinator's, evaluated once). */
export const NOW: unique symbol = Symbol('now()');

/** The columns a finished row takes in place of the row's own. */
export type FinishedChanges = Partial<Record<WorkflowColumn, FinishedValue>>;

/** At most this many rows per statement: 35 parameters a row stay far below the protocol's 65,535. */
const ROWS_PER_STATEMENT = 64;

/**
 * `INSERT INTO <table> (<the shared columns>) VALUES (…), (…)` of `rows`, each row's columns as read (`RowAsSent`)
 * but for its `changes`, in statements of at most 64 rows; the queue (every row's `queue_name`) is one parameter, so
 * that Citus plans each as a router insert on the queue's node ("router insert": no `SELECT`, no rows through the
 * coordinator's planner). Times keep their microseconds (the text goes back as it came).
 */
export function insertRowsSql(
  table: string,
  queue: string,
  rows: Array<{ row: RowAsSent; changes: FinishedChanges }>,
): Array<{ sql: string; params: unknown[] }> {
  const statements: Array<{ sql: string; params: unknown[] }> = [];
  for (let first = 0; first < rows.length; first += ROWS_PER_STATEMENT) {
    const params: unknown[] = [queue];
    const add = (value: unknown) => `$${params.push(value)}`;
    const tuples = rows.slice(first, first + ROWS_PER_STATEMENT).map(({ row, changes }) => {
      const values = WORKFLOW_COLUMNS.map((column) => {
        if (column === 'queue_name') return '$1';
        const value = column in changes ? changes[column] : row[column];
        if (value === null || value === undefined) return 'NULL';
        if (value === NOW) return 'now()';
        if (typeof value === 'object') return nowPlusMsSql(true, `${add(value.msFromNow)}::float8`);
        return add(value);
      });
      return `(${values.join(', ')})`;
    });
    statements.push({ sql: `INSERT INTO ${table} (${WORKFLOW_COLUMN_LIST}) VALUES ${tuples.join(', ')}`, params });
  }
  return statements;
}
