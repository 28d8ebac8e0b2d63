import { WorkflowDeterminismError } from '../../errors/workflow-determinism.error';
import {
  ACTIVE_WORKFLOW_STATUSES,
  WORKFLOW_STATUSES,
  type WorkflowStatus,
} from '../../interfaces/workflow-status.interface';

/** The statuses a row of `workflows` can hold: `DELAYED` is reported, never stored (see `REPORTED_STATUS_SQL`). */
export type StoredWorkflowStatus = Exclude<WorkflowStatus, 'DELAYED'>;

function isStored(status: WorkflowStatus): status is StoredWorkflowStatus {
  return status !== 'DELAYED';
}

/** A list of statuses as SQL, for `status IN ...`: `('ENQUEUED', 'PENDING')`. */
export function statusListSql(statuses: readonly WorkflowStatus[]): string {
  return `(${statuses
    .filter(isStored)
    .map((status) => `'${status}'`)
    .join(', ')})`;
}

/**
 * Every stored status as an SQL literal, so that the SQL names statuses from `WORKFLOW_STATUSES` and a misspelt one
 * does not compile: `status = ${STATUS_SQL.PENDING}`.
 */
export const STATUS_SQL = Object.fromEntries(
  WORKFLOW_STATUSES.filter(isStored).map((status) => [status, `'${status}'`]),
) as Readonly<Record<StoredWorkflowStatus, string>>;

/** The stored statuses that hold a deduplication ID (`ENQUEUED`, which covers `DELAYED`, `PENDING` and `WAITING`). */
export const ACTIVE_STATUSES_SQL = statusListSql(ACTIVE_WORKFLOW_STATUSES);

/** The statuses of the history's rows: finished workflows. */
export const HISTORY_STATUSES: readonly WorkflowStatus[] = ['SUCCESS', 'ERROR', 'CANCELLED'];

/**
 * The statuses of the active table's rows that are workflows there (what can run, and dead letters waiting for
 * `resume`); its other rows are the key records of finished workflows whose deduplication window is open. A row of
 * these statuses that has a key holds it: a dead letter holds one only when a code change parked it (see
 * `parkedSql`), until it is resumed and ends, or is cancelled.
 */
export const ACTIVE_TABLE_WORKFLOW_STATUSES_SQL = statusListSql([
  'ENQUEUED',
  'PENDING',
  'WAITING',
  'MAX_RECOVERY_ATTEMPTS_EXCEEDED',
]);

/**
 * A dead letter parked by a code change (its error a `WorkflowDeterminismError`; `row`: the row's alias and a dot, or
 * nothing). It keeps its key, and unlike other dead letters `cancel` ends it and `getResult()` waits for it: it is
 * meant to go on once a fix is deployed and it is resumed.
 */
export function parkedSql(row = ''): string {
  return `(${row}status = ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED} AND ${row}error ->> 'name' = '${DETERMINISM_ERROR}')`;
}

/** The name of the error a parked run records. */
export const DETERMINISM_ERROR = WorkflowDeterminismError.name;

/** What `cancel` ends: a workflow that can still run (`ACTIVE_STATUSES_SQL`), or a parked one (see `parkedSql`). */
export function cancellableSql(row = ''): string {
  return `(${row}status IN ${ACTIVE_STATUSES_SQL} OR ${parkedSql(row)})`;
}

/** The statuses `resume` puts back in the queue. */
export const RESUMABLE_STATUSES: readonly StoredWorkflowStatus[] = ['CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'];

/** An ENQUEUED row whose start time is still ahead by the database's clock: reported as `DELAYED`. */
export const DELAYED_SQL = `(status = ${STATUS_SQL.ENQUEUED} AND not_before > now())`;

/** An ENQUEUED row that is due (no start time, or one that has come): reported as `ENQUEUED`, and claimable. */
export const READY_SQL = `(status = ${STATUS_SQL.ENQUEUED} AND (not_before IS NULL OR not_before <= now()))`;

/**
 * Any row but a PENDING one. The dashboard's indexes leave PENDING rows out (a claim then writes fewer index
 * entries), so every read they serve states it; PENDING rows are read through `workflows_running`.
 */
export const NOT_PENDING_SQL = `status <> ${STATUS_SQL.PENDING}`;
