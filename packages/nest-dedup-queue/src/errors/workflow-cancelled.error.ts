import { DedupQueueError } from './dedup-queue.error';
import type { WorkflowStatus } from '../interfaces/workflow-status.interface';

/** `WorkflowHandle.getResult()` rejects with this when the workflow was cancelled (or otherwise ended without a result). */
export class WorkflowCancelledError extends DedupQueueError {
  constructor(
    readonly workflowId: string,
    readonly status: WorkflowStatus,
  ) {
    super(`Workflow "${workflowId}" ended with status ${status} and has no result`);
  }
}
