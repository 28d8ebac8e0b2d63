/** Options of one `QueueService.enqueue()` call. */
export interface EnqueueOptions {
  /**
   * While a workflow with this ID is `ENQUEUED` or `PENDING` in the queue, another enqueue with the same ID into
   * the same queue throws `QueueDeduplicatedError` and writes nothing. 1 to 255 characters.
   */
  deduplicationId?: string;
  /**
   * The workflow's ID (default: a random UUID). Enqueueing the same ID twice is idempotent: the second call returns
   * a handle to the first workflow, whose body runs once. 1 to 255 characters.
   */
  workflowId?: string;
  /**
   * Start-to-close timeout in milliseconds: once started, a workflow still running after this long is cancelled
   * (status CANCELLED, deduplication ID freed), even if its process died; its body sees `workflowContext().signal`
   * abort and no further step starts.
   */
  timeoutMs?: number;
  /**
   * Workflows with the same partition key share the queue's `partitionConcurrency` (and a per-partition rate limit),
   * and partitions are served round-robin, so a busy key never starves the others. 1 to 255 characters.
   */
  partitionKey?: string;
  /** Lower runs first; FIFO within a priority. An integer, default 0. */
  priority?: number;
  /** Start no earlier than this many milliseconds from now. The workflow holds its deduplication ID meanwhile. */
  delayMs?: number;
  /** Start no earlier than this time (instead of `delayMs`). */
  runAt?: Date;
}
