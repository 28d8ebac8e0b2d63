/** A rate limit: at most `limit` workflow starts in any window of `periodMs`, across all processes. */
export interface RateLimit {
  limit: number;
  periodMs: number;
  /** Apply the limit to each partition key separately instead of to the whole queue. Default false. */
  perPartition?: boolean;
}

/** The limits of a queue; all hold across any number of processes sharing the database, except `workerConcurrency`. */
export interface QueueLimits {
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
  /**
   * The most workflows with the same `partitionKey` that may run at once across all processes ("one running task
   * per user, the rest waiting in order"). Unset: no per-key limit. Partitions are always served round-robin.
   */
  partitionConcurrency?: number;
  /** At most `limit` starts per `periodMs` (sliding window), per queue or per partition. */
  rateLimit?: RateLimit;
}

/** One queue declared in `DedupQueueModule.forRoot({ queues })` or `DedupQueueModule.registerQueue()`. */
export interface QueueOptions extends QueueLimits {
  /** The queue's name, used in `QueueService.enqueue(name, ...)` and `@InjectQueue(name)`. 1 to 100 characters. */
  name: string;
}
