import { DedupQueueError } from './dedup-queue.error';

/**
 * Thrown by an enqueue with `requireSameArgs: true` when its deduplication ID is held by a workflow whose arguments
 * differ from the call's (compared as stored JSON), whatever the duplicate policy. Nothing was written.
 * `DedupExceptionFilter` turns it into HTTP 422 (a reused idempotency key with another request).
 */
export class DeduplicationMismatchError extends DedupQueueError {
  constructor(
    /** The queue the enqueue targeted. */
    readonly queueName: string,
    /** The deduplication ID that is held. */
    readonly deduplicationId: string,
    /** The workflow that holds the deduplication ID, with other arguments. */
    readonly existingWorkflowId: string,
  ) {
    super(
      `Deduplication ID "${deduplicationId}" is held in queue "${queueName}" by workflow "${existingWorkflowId}", whose arguments differ from this call's`,
    );
  }
}
