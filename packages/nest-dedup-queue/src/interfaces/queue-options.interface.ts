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
  /**
   * Declares a hot queue that may be spread over several shards (an integer from 1 to 64; default 1), so that no
   * limit may hold across the whole queue: a queue with `shards` above 1 takes no `concurrency`,
   * `partitionConcurrency` or `rateLimit` (refused at boot, and by `setQueueLimits`); `workerConcurrency` limits
   * each process as usual. On one PostgreSQL server the queue stays one queue (the option only fixes the rules).
   * With `distribution: 'citus'` its rows are stored under one name per shard, which Citus places on different worker
   * nodes: a workflow's shard follows from its deduplication ID (or its workflow ID without one), so deduplication
   * stays exact; workers claim from the shards in turn, and everything by the queue's name (lists, counts, pause,
   * cancel, reports) covers them all (docs/citus.md, "A hot queue").
   */
  shards?: number;
}
