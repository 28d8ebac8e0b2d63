import { DedupQueueError } from './dedup-queue.error';

/**
 * Thrown by `QueueService.enqueue()` when another workflow with the same deduplication ID is still `ENQUEUED` or
 * `PENDING` in the same queue. Nothing was written. `DedupExceptionFilter` turns it into HTTP 409.
 */
export class QueueDeduplicatedError extends DedupQueueError {
  constructor(
    /** The queue the enqueue targeted. */
    readonly queueName: string,
    /** The deduplication ID that is taken. */
    readonly deduplicationId: string,
    /** The workflow that holds the deduplication ID. */
    readonly existingWorkflowId: string,
    /** More about the holder, appended to the message (e.g. that no live executor would run it). */
    note?: string,
  ) {
    super(
      `Deduplication ID "${deduplicationId}" is held in queue "${queueName}" by workflow "${existingWorkflowId}", which is enqueued or running` +
        (note ? `; ${note}` : ''),
    );
  }
}
