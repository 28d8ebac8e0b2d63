/** A workflow to enqueue, as the enqueue statements take it (one row of `workflow_queue`). */
export interface NewWorkflow {
  workflowId: string;
  /** Whether the caller chose the ID (it may name a finished workflow) or it was generated (new by construction). */
  workflowIdGiven: boolean;
  queueName: string;
  workflowName: string;
  /** The version of the workflow the run is enqueued with (see `WorkflowRegistry.versionToEnqueue`). */
  version: number;
  deduplicationId: string | null;
  /** The arguments, already serialised to JSON text. */
  inputsJson: string;
  timeoutMs: number | null;
  /** A deadline it starts with (a child's, inherited from its parent), by the database's clock; else from `timeoutMs`. */
  deadlineAt: Date | null;
  maxAttempts: number;
  maxRecoveryAttempts: number;
  partitionKey: string | null;
  priority: number;
  /** Start no earlier than this; or `delayMs` from now by the database's clock. */
  runAt: Date | null;
  delayMs: number | null;
  /** With `replace` + `delayMs`: the start is never later than this long after the key was taken. */
  maxDelayMs: number | null;
  /** Keep the deduplication ID this long after the workflow ended. */
  deduplicationWindowMs: number | null;
  releaseKeyOnError: boolean;
  /** The W3C `traceparent` of the enqueue's span, when it was traced. */
  traceContext: string | null;
  /** The workflow whose body enqueued this one, when it was enqueued from inside a running workflow. */
  parentWorkflowId: string | null;
  /** The workflow a fork copies its recorded positions from (`QueueService.fork`). */
  forkedFrom: string | null;
}
