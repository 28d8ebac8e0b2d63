import { DedupQueueError } from './dedup-queue.error';

/** Thrown when a workflow ID names no stored workflow. */
export class WorkflowNotFoundError extends DedupQueueError {
  constructor(readonly workflowId: string) {
    super(`Workflow "${workflowId}" does not exist`);
  }
}
