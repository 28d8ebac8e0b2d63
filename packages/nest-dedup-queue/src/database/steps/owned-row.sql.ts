import { STATUS_SQL } from '../tables/workflow-status.sql';

/** SQL references (parameters, or a function's arguments) to a run of a workflow: its queue, ID, executor and run. */
export interface RunRefs {
  queue: string;
  workflow: string;
  executor: string;
  /** The run's number (the row's `attempts`). */
  attempt: string;
}

/**
 * "The run owns its workflow", written once: the active row of the workflow is PENDING under the run's executor in
 * the run's number (not a later run of it, after a cancel and resume). A condition over the active table's columns.
 */
export function ownsRowSql(run: RunRefs): string {
  return `queue_name = ${run.queue} AND workflow_id = ${run.workflow} AND status = ${STATUS_SQL.PENDING}
      AND executor_id = ${run.executor} AND attempts = ${run.attempt}`;
}

/** The active row that `run` owns (`ownsRowSql`), its `columns` (by default its queue and creation time). */
export function ownedRowSql(active: string, run: RunRefs, columns = 'queue_name, created_at'): string {
  return `SELECT ${columns} FROM ${active}
    WHERE ${ownsRowSql(run)}`;
}
