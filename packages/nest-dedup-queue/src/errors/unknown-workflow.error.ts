import { DedupQueueError } from './dedup-queue.error';

/**
 * Thrown when enqueueing a workflow that no `@Workflow()` method of this application registered and that
 * `forRoot({ externalWorkflows })` does not list.
 */
export class UnknownWorkflowError extends DedupQueueError {
  constructor(
    readonly workflowName: string,
    hint: string,
  ) {
    super(`Workflow "${workflowName}" is not registered: ${hint}`);
  }
}
