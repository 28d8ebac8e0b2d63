/**
 * The lifecycle state of a workflow.
 *
 * - `ENQUEUED`: ready, waiting in its queue for a worker; holds its deduplication ID.
 * - `DELAYED`: waiting for its start time (`delayMs`, `runAt`, or a retry's backoff) by the database's clock; holds
 *   its deduplication ID, and becomes `ENQUEUED` when the time comes. Stored as ENQUEUED with a future `notBefore`.
 * - `PENDING`: claimed by a worker and running; holds its deduplication ID.
 * - `WAITING`: started, and suspended in `sleep()` or `recv()` until `notBefore` (or a message): holds its
 *   deduplication ID but no worker slot (it counts towards no `concurrency`, `workerConcurrency` or partition limit),
 *   and is claimed again, through its queue like any due workflow, when it wakes.
 * - `SUCCESS`, `ERROR`, `CANCELLED`, `MAX_RECOVERY_ATTEMPTS_EXCEEDED`: finished; the deduplication ID is free.
 */
export type WorkflowStatus =
  'ENQUEUED' | 'DELAYED' | 'PENDING' | 'WAITING' | 'SUCCESS' | 'ERROR' | 'CANCELLED' | 'MAX_RECOVERY_ATTEMPTS_EXCEEDED';

/** The statuses in which a workflow holds its deduplication ID. */
export const ACTIVE_WORKFLOW_STATUSES: readonly WorkflowStatus[] = ['ENQUEUED', 'DELAYED', 'PENDING', 'WAITING'];

/** The statuses a workflow never leaves. */
export const FINISHED_WORKFLOW_STATUSES: readonly WorkflowStatus[] = [
  'SUCCESS',
  'ERROR',
  'CANCELLED',
  'MAX_RECOVERY_ATTEMPTS_EXCEEDED',
];

/** Every status, active ones first, as the dashboard and the metrics list them. */
export const WORKFLOW_STATUSES: readonly WorkflowStatus[] = [
  ...ACTIVE_WORKFLOW_STATUSES,
  ...FINISHED_WORKFLOW_STATUSES,
];

/** The error a failed workflow recorded, as stored in Postgres. */
export interface WorkflowErrorInfo {
  /** The `name` of the thrown error (`'Error'`, `'TypeError'`, a custom class name, ...). */
  name: string;
  /** The `message` of the thrown error. */
  message: string;
  /**
   * The stack trace, when the thrown value had one. Kept in the database for operators (the dashboard shows it with
   * `showErrorStacks: true`; `getResult()`'s `WorkflowFailedError.recordedError` has it), but never in
   * `getStatus()` or `list()`, which an application may return over HTTP as they are.
   */
  stack?: string;
  /** The error's own string, number, boolean and null properties (`code`, `existingWorkflowId`, ...), if any. */
  fields?: Record<string, string | number | boolean | null>;
}

/** A snapshot of one workflow's row, as returned by `WorkflowHandle.getStatus()` and `QueueService.list()`. */
export interface WorkflowStatusInfo<R = unknown> {
  workflowId: string;
  status: WorkflowStatus;
  queueName: string;
  /** The registered workflow name, `ClassName.methodName` unless `@Workflow({ name })` says otherwise. */
  workflowName: string;
  /** The version of the workflow the run was enqueued with (`@Workflow({ version })`; 1 for runs before 1.1). */
  version: number;
  /** The deduplication ID given at enqueue; kept for reference after the workflow finished (the key itself is freed). */
  deduplicationId: string | null;
  /** The executor (process) that claimed the workflow, once claimed. */
  executorId: string | null;
  /** How many times the workflow has been claimed. */
  attempts: number;
  createdAt: Date;
  startedAt: Date | null;
  completedAt: Date | null;
  /**
   * The recorded error when `status` is `ERROR` (or the last failed attempt's, while a retry waits): its name, message
   * and fields, without the stack (see `WorkflowErrorInfo.stack`).
   */
  error: Omit<WorkflowErrorInfo, 'stack'> | null;
  /**
   * The workflow's return value (as stored: JSON round-tripped) once `status` is `SUCCESS`; absent before, and in
   * `QueueService.list()`, which leaves results out to keep pages small. `getResult()` waits for it instead.
   */
  result?: R;
  partitionKey: string | null;
  priority: number;
  /**
   * While ENQUEUED or DELAYED: the earliest start (a delay, or a retry's backoff); DELAYED while it is ahead (a
   * `queue-next` follow-up waiting for its key is DELAYED with null). While WAITING: when it wakes (the end of its
   * `sleep()`, or the timeout of its `recv()` or `getEvent()`); null when it waits with no timeout.
   */
  notBefore: Date | null;
  /**
   * The workflow whose body enqueued this one (a child workflow), or null when it was enqueued from outside a
   * workflow. See docs/composing-workflows.md.
   */
  parentWorkflowId: string | null;
  /** Present when `onDuplicate: 'supersede'` cancelled this workflow: the workflow that took its key. */
  supersededBy?: string;
  /** Present when this workflow was enqueued with `onDuplicate: 'supersede'` and cancelled a holder: that holder. */
  supersedes?: string;
  /** Present when this workflow is a fork (`QueueService.fork`): the workflow it was forked from. */
  forkedFrom?: string;
  /**
   * Present only when a stored value of the row is not of its documented type (written by hand, by SQL or by another
   * version): each such field with what was stored. The field then holds a stand-in: null where it may be null, the
   * earliest or latest date JavaScript holds for an infinite time, the value as stored for an unknown status. The
   * rest of the row (and of the list) is read as usual.
   */
  unexpectedValues?: UnexpectedValue[];
}

/**
 * A stored value that a read could not give as its documented type (a row written by hand, by SQL, or by another
 * version): the field, and what was stored, as text. The field holds a stand-in meanwhile (see `unexpectedValues`).
 */
export interface UnexpectedValue {
  field: string;
  value: string;
}
