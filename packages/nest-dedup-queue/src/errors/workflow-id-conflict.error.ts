import { DedupQueueError } from './dedup-queue.error';

/**
 * Thrown when an enqueue reuses a `workflowId` that already names a workflow of another queue or another workflow
 * function. (Reusing it for the same queue and function is idempotent and returns the existing handle.)
 */
export class WorkflowIdConflictError extends DedupQueueError {
  constructor(
    readonly workflowId: string,
    existing: { queueName: string; workflowName: string },
  ) {
    super(
      `Workflow ID "${workflowId}" is already used by workflow "${existing.workflowName}" in queue "${existing.queueName}"`,
    );
  }
}
