import { DedupQueueError } from './dedup-queue.error';

/**
 * Thrown (and recorded) when a running workflow enqueues a child into its own queue with its own deduplication ID:
 * the parent holds that key until it ends, so the child could never start while the parent runs (and a parent that
 * waits for it would wait forever). Nothing was written. Use another deduplication ID or another queue.
 */
export class ChildKeyHeldByParentError extends DedupQueueError {
  constructor(
    /** The workflow that enqueued the child and holds the key. */
    readonly parentWorkflowId: string,
    /** The queue of both. */
    readonly queueName: string,
    /** The deduplication ID the child asked for. */
    readonly deduplicationId: string,
  ) {
    super(
      `Workflow "${parentWorkflowId}" cannot enqueue a child into its own queue "${queueName}" with its own deduplication ID "${deduplicationId}": it holds that key until it ends, so the child could never start; use another deduplication ID or another queue`,
    );
  }
}
