/** One queue declared in `DedupQueueModule.forRoot({ queues })`. */
export interface QueueOptions {
  /** The queue's name, used in `QueueService.enqueue(name, ...)`. 1 to 100 characters. */
  name: string;
  /**
   * The most workflows of this queue that may run at once across all processes sharing the database.
   * Unset: no global limit (each process is still limited by `workerConcurrency`).
   */
  concurrency?: number;
  /**
   * The most workflows of this queue that one process runs at once.
   * Default: `concurrency` when that is set and smaller than 10, otherwise 10.
   */
  workerConcurrency?: number;
}
