import type { DeduplicationHolderState } from '../../../errors/queue-deduplicated.error';
import { FINISHED_WORKFLOW_STATUSES, type WorkflowStatus } from '../../../interfaces/workflow-status.interface';
import type { NewWorkflow } from '../new-workflow';

/** What became of one workflow that `WorkflowInserter` inserted, as its statement's row tells. */
export type InsertResult =
  | { outcome: 'inserted' }
  | { outcome: 'duplicate-workflow-id'; existing: { queueName: string; workflowName: string } }
  /**
   * The deduplication ID is held; `holderId` when the statement could already see the holder, with what a refusal
   * reports about it (`holder`) when the statement read that too (a batch's insert; not a caller's transaction's).
   */
  | { outcome: 'deduplicated'; holderId?: string; holder?: HolderReport }
  /** The row this call collided with was not visible yet; try again. */
  | { outcome: 'retry' };

/** Refusals known before their batch commits, by their position in the batch. */
export type EarlyRefusals = ReadonlyMap<number, InsertResult>;

/** The workflow that holds a deduplication key, as `findHolder` reads it. */
export interface Holder {
  workflowId: string;
  status: WorkflowStatus;
  /** Whether it has run before (it may be ENQUEUED again, waiting for a retry or after a recovery). */
  started: boolean;
  /** Whether its stored arguments equal the ones asked about (as JSON), when `findHolder` was given some. */
  sameArgs?: boolean;
}

/** A workflow that `supersede` ended: the key's holder (`heldKey`) or its waiting follow-up. */
export interface SupersededWorkflow {
  workflowId: string;
  workflowName: string;
  /** Its claim count: the run that the cancel ended. */
  attempt: number;
  heldKey: boolean;
}

/** What `supersede` did. */
export type SupersedeResult =
  /** The new workflow holds the key; `ended` were cancelled in the same transaction (none when the key was free). */
  | { outcome: 'inserted'; ended: SupersededWorkflow[] }
  /** A finished workflow holds the key within its deduplication window: nothing was written. */
  | { outcome: 'window-held'; holderId: string }
  /** `requireSameArgs`, and the holder's arguments differ: nothing was written. */
  | { outcome: 'mismatch'; holderId: string }
  /** The caller's workflow ID names a workflow already: nothing was written. */
  | { outcome: 'workflow-id-taken' }
  /** The key was taken meanwhile (it was free when looked at); nothing was written: try again. */
  | { outcome: 'retry' };

/** What `sendToHolder` did. */
export type SendResult =
  /** The holder (queued, running or waiting) got the arguments as a message; `woken` if it waited for one. */
  | { outcome: 'sent'; holderId: string }
  /** A finished workflow holds the key within its deduplication window: nothing was written. */
  | { outcome: 'window-held'; holderId: string }
  /** `requireSameArgs`, and the holder's arguments differ: nothing was written. */
  | { outcome: 'mismatch'; holderId: string }
  /** Nobody holds the key (any more): nothing was written; insert again. */
  | { outcome: 'free' };

/** A refused duplicate's holder, as `holderReports` reads it. */
export interface HolderReport {
  state: DeduplicationHolderState;
  /** Its name and version when it waits to be claimed (queued, delayed or waiting); undefined when it runs or ended. */
  waitingRun?: { name: string; version: number };
}

/** A holder's row as a refused duplicate reports it: its status, a delayed one's start, a finished one's window end. */
export function holderStateOf(row: { status: WorkflowStatus; not_before: unknown; dedup_expires_at: unknown }) {
  const finished = FINISHED_WORKFLOW_STATUSES.includes(row.status);
  return {
    status: row.status,
    ...(row.status === 'DELAYED' && row.not_before instanceof Date ? { startsAt: row.not_before } : {}),
    ...(finished && row.dedup_expires_at instanceof Date ? { windowEndsAt: row.dedup_expires_at } : {}),
  } satisfies DeduplicationHolderState;
}

/** The columns of `HOLDER_REPORT_COLUMNS_SQL`, as read. */
export interface HolderReportRow {
  status: WorkflowStatus;
  not_before: unknown;
  dedup_expires_at: unknown;
  workflow_name: string;
  workflow_version: number;
  waiting: boolean;
}

/** A holder's report from its row's `HOLDER_REPORT_COLUMNS_SQL`. */
export function holderReportOf(row: HolderReportRow): HolderReport {
  return {
    state: holderStateOf(row),
    waitingRun: row.waiting ? { name: row.workflow_name, version: row.workflow_version } : undefined,
  };
}

/** A row of the batch insert: what became of one workflow of the batch, in the batch's order. */
export type InsertedRow = {
  inserted: boolean;
  existing_queue: string | null;
  existing_workflow: string | null;
  holder_id: string | null;
  deduplication_id: string | null;
} & { [column in keyof HolderReportRow as `holder_${column}`]: HolderReportRow[column] | null };

/** One workflow's result from its row of the batch insert. */
export function insertResultOf(row: InsertedRow): InsertResult {
  if (row.inserted) return { outcome: 'inserted' };
  if (row.existing_queue !== null) {
    return {
      outcome: 'duplicate-workflow-id',
      existing: { queueName: row.existing_queue, workflowName: row.existing_workflow as string },
    };
  }
  if (row.deduplication_id === null) return { outcome: 'retry' };
  if (row.holder_id === null || row.holder_status === null) return { outcome: 'deduplicated' };
  return {
    outcome: 'deduplicated',
    holderId: row.holder_id,
    holder: holderReportOf({
      status: row.holder_status,
      not_before: row.holder_not_before,
      dedup_expires_at: row.holder_dedup_expires_at,
      workflow_name: row.holder_workflow_name as string,
      workflow_version: row.holder_workflow_version as number,
      waiting: row.holder_waiting === true,
    }),
  };
}

/** What `loneGenerated` returns: an inserted row, or a refused one with its holder. */
export type LoneInsertedRow = Omit<InsertedRow, 'existing_queue' | 'existing_workflow' | 'deduplication_id'>;

/** A lone generated row's result: its statement's row, or, with none, a refusal by a holder it could not see. */
export function loneResultOf(row: LoneInsertedRow | undefined, workflow: NewWorkflow): InsertResult {
  if (!row) return workflow.deduplicationId === null ? { outcome: 'retry' } : { outcome: 'deduplicated' };
  const { deduplicationId } = workflow;
  return insertResultOf({ ...row, existing_queue: null, existing_workflow: null, deduplication_id: deduplicationId });
}

/**
 * The refusals of `results` whose holder committed before the batch: a holder of the batch itself is only there once
 * the batch commits.
 */
export function refusedBeforeTheBatch(workflows: NewWorkflow[], results: InsertResult[]): EarlyRefusals {
  const batchIds = new Set(workflows.map((workflow) => workflow.workflowId));
  const refused = new Map<number, InsertResult>();
  results.forEach((result, at) => {
    if (result.outcome === 'deduplicated' && result.holderId !== undefined && !batchIds.has(result.holderId)) {
      refused.set(at, result);
    }
  });
  return refused;
}
