/** A prom-client `Registry` (or anything with the same methods). */
export interface MetricsRegistry {
  registerMetric(metric: unknown): void;
  getSingleMetric(name: string): unknown;
  removeSingleMetric(name: string): void;
}

/** The `metrics` option of `DedupQueueModule.forRoot()` in its long form. */
export interface DedupQueueMetricsOptions {
  /** The prom-client `Registry` to register on. Default: prom-client's default registry (`register`). */
  registry?: MetricsRegistry;
  /**
   * How long a scrape may wait for Postgres, in milliseconds; past it the gauges are left out of that scrape
   * (the counters and histograms are still there). Default 3000.
   */
  scrapeTimeoutMs?: number;
  /**
   * How old the counts of finished workflows (SUCCESS, ERROR, CANCELLED, MAX_RECOVERY_ATTEMPTS_EXCEEDED) in
   * `dedup_queue_workflows` may be, in milliseconds. Counting them scans the table (about 0.3 s per million rows),
   * so a scrape that finds them older starts a recount in the background and reports the previous count meanwhile;
   * only the first scrape waits for it. ENQUEUED and PENDING (index scans of the active set) and the oldest wait are
   * read at every scrape. `0`: count everything at every scrape, and wait for it. Default 60000.
   */
  finishedCountsMaxAgeMs?: number;
}
