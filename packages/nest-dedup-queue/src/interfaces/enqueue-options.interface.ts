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
}
