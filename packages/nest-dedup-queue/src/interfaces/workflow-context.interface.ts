/** What a running workflow knows about itself. */
export interface WorkflowContext {
  readonly workflowId: string;
  readonly workflowName: string;
  /** The version of the workflow the run was enqueued with (`@Workflow({ version })`). */
  readonly version: number;
  readonly queueName: string;
  /** 1 on the first run; higher after retries and recoveries. */
  readonly attempt: number;
  /**
   * Aborts when the workflow is cancelled, times out, is recovered by another process, or is interrupted by
   * shutdown; `signal.reason` is a `WorkflowInterruptedError`. Pass it to fetch, timers and drivers that take one.
   */
  readonly signal: AbortSignal;
}
