import { DedupQueueError } from './dedup-queue.error';

/** `WorkflowHandle.getResult({ timeoutMs })` rejects with this when the workflow has not finished in time. */
export class WorkflowResultTimeoutError extends DedupQueueError {
  constructor(
    readonly workflowId: string,
    readonly timeoutMs: number,
  ) {
    super(`Workflow "${workflowId}" did not finish within ${timeoutMs} ms`);
  }
}
