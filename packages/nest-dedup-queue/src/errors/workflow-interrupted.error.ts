import { DedupQueueError } from './dedup-queue.error';

/** Why a running workflow was told to stop. */
export type InterruptReason = 'cancelled' | 'timed-out' | 'ownership-lost' | 'shutdown';

const EXPLANATIONS: Record<InterruptReason, string> = {
  cancelled: 'was cancelled',
  'timed-out': 'timed out',
  'ownership-lost': 'is no longer owned by this process (its lease expired and it was recovered elsewhere)',
  shutdown: 'was interrupted by shutdown; it stays PENDING and is recovered',
};

/**
 * The reason of `workflowContext().signal` once it aborts, and what a step throws when it would start after that.
 * Workflow code may catch it to clean up; the workflow's recorded state is already decided.
 */
export class WorkflowInterruptedError extends DedupQueueError {
  constructor(
    readonly workflowId: string,
    readonly reason: InterruptReason,
  ) {
    super(`Workflow "${workflowId}" ${EXPLANATIONS[reason]}`);
  }
}
