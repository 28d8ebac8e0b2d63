import type { WorkflowStatusInfo } from './workflow-status.interface';

/** Options of `WorkflowHandle.getResult()`. */
export interface GetResultOptions {
  /** Give up waiting after this many milliseconds with a `WorkflowResultTimeoutError`. Default: wait forever. */
  timeoutMs?: number;
}

/** A reference to one enqueued workflow. */
export interface WorkflowHandle<R = unknown> {
  /** The workflow's ID. */
  readonly workflowId: string;
  /**
   * Reads the workflow's current row, with its `result` once it succeeded. A failure's error comes with its name,
   * message and fields, never its stack, so the status can be returned over HTTP as it is.
   */
  getStatus(): Promise<WorkflowStatusInfo<R>>;
  /**
   * Waits until the workflow has finished and resolves with its return value (as stored: JSON round-tripped).
   * Rejects with `WorkflowFailedError` if it failed and `WorkflowCancelledError` if it was cancelled.
   */
  getResult(options?: GetResultOptions): Promise<R>;
}

/** The handle `QueueService.enqueue()` returns. */
export interface EnqueuedWorkflowHandle<R = unknown> extends WorkflowHandle<R> {
  /**
   * True when this call created the workflow; false when it returned an existing one (same `workflowId`, or an
   * `onDuplicate` policy that returns or updates the holder).
   */
  readonly created: boolean;
}
