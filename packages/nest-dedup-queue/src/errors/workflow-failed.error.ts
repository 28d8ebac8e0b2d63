import { DedupQueueError } from './dedup-queue.error';
import type { WorkflowErrorInfo } from '../interfaces/workflow-status.interface';

/** `WorkflowHandle.getResult()` rejects with this when the workflow ended with status `ERROR`. */
export class WorkflowFailedError extends DedupQueueError {
  /** The `name` of the error the workflow threw. */
  readonly causeName: string;

  constructor(
    readonly workflowId: string,
    readonly recordedError: WorkflowErrorInfo,
  ) {
    super(`Workflow "${workflowId}" failed: ${recordedError.message}`);
    this.causeName = recordedError.name;
  }
}
