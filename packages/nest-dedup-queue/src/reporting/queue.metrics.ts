import { Inject, Injectable, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import type * as PromClient from 'prom-client';
import { DedupQueueConfig } from '../dedup-queue.config';
import { DEDUP_QUEUE_OPTIONS } from '../dedup-queue.module-definition';
import { QueueDatabase } from '../database/connection/queue-database';
import { QueueStatsStore, StatusCount } from '../database/queues/queue-stats.store';
import { QueueScheduler } from '../scheduler/queue.scheduler';
import { WorkflowVersionsMonitor } from '../scheduler/workflow-versions.monitor';
import type { StrandedRuns } from '../interfaces/workflow-version.interface';
import { settleWithin } from '../utils/settle-within';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import type { DedupQueueModuleOptions } from '../interfaces/dedup-queue-options.interface';
import type { DeduplicationOutcome } from '../interfaces/deduplication-event.interface';
import type { MetricsRegistry } from '../interfaces/metrics-options.interface';
import { WORKFLOW_STATUSES, WorkflowStatus } from '../interfaces/workflow-status.interface';
import { optionalPeer } from '../observability/optional-peer';
import { LifecycleEvent, WorkflowLifecycle } from '../observability/workflow-lifecycle.events';
import { ModuleLogger } from '../utils/module-logger';

const FINISHED_BY_EVENT: Partial<Record<LifecycleEvent['event'], WorkflowStatus>> = {
  completed: 'SUCCESS',
  failed: 'ERROR',
  cancelled: 'CANCELLED',
  'dead-lettered': 'MAX_RECOVERY_ATTEMPTS_EXCEEDED',
};
const OUTCOMES: readonly DeduplicationOutcome[] = [
  'rejected',
  'returned-existing',
  'replaced',
  'queued-next',
  'superseded',
  'mismatched',
  'sent',
];
/** From 5 ms to an hour. */
const SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600];
const DEFAULT_SCRAPE_TIMEOUT_MS = 3000;
const DEFAULT_FINISHED_COUNTS_MAX_AGE_MS = 60_000;

interface Metrics {
  workflows: PromClient.Gauge;
  oldestAge: PromClient.Gauge;
  abandoned: PromClient.Gauge;
  stranded: PromClient.Gauge;
  enqueued: PromClient.Counter;
  deduplicated: PromClient.Counter;
  finished: PromClient.Counter;
  wait: PromClient.Histogram;
  runDuration: PromClient.Histogram;
}

/**
 * The Prometheus metrics of `forRoot({ metrics })`: gauges read from Postgres when scraped (cluster-wide), counters
 * and histograms fed by this process's workflow lifecycle. A scrape never fails or hangs because of the database:
 * past `scrapeTimeoutMs` the gauges are left out, and the failure is logged once until a read succeeds again.
 */
@Injectable()
export class QueueMetrics implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new ModuleLogger('DedupQueue');
  private readonly stats: QueueStatsStore;
  private registry?: MetricsRegistry;
  private metrics?: Metrics;
  private unlisten?: () => void;
  private scrapeTimeoutMs = DEFAULT_SCRAPE_TIMEOUT_MS;
  private finishedCountsMaxAgeMs = DEFAULT_FINISHED_COUNTS_MAX_AGE_MS;
  private finishedCounts?: { at: number; counts: StatusCount[] };
  private reading?: Promise<Snapshot | undefined>;
  private recounting?: Promise<void>;
  private readFailing = false;

  constructor(
    @Inject(DEDUP_QUEUE_OPTIONS) private readonly options: DedupQueueModuleOptions,
    private readonly config: DedupQueueConfig,
    private readonly lifecycle: WorkflowLifecycle,
    private readonly database: QueueDatabase,
    private readonly scheduler: QueueScheduler,
    private readonly versions: WorkflowVersionsMonitor,
  ) {
    this.stats = new QueueStatsStore(database);
  }

  async onModuleInit(): Promise<void> {
    try {
      this.register();
    } catch (error) {
      // NOTE: a failed boot runs no shutdown hooks; close the pool here or it keeps the process alive.
      await this.database.close();
      throw error;
    }
  }

  private register(): void {
    const option = this.options.metrics;
    if (option === undefined || option === false) return;
    const fail = (message: string): never => {
      throw new DedupQueueConfigurationError(`DedupQueueModule: ${message}`);
    };
    if (option !== true && (option === null || typeof option !== 'object')) {
      fail('`metrics` must be true, false or { registry?, scrapeTimeoutMs?, finishedCountsMaxAgeMs? }');
    }
    const prom = optionalPeer<typeof PromClient>('prom-client');
    if (!prom) fail('`metrics` needs the prom-client package: npm install prom-client');
    const settings = option === true ? {} : option;
    this.scrapeTimeoutMs = integerAtLeast(
      settings.scrapeTimeoutMs,
      'metrics.scrapeTimeoutMs',
      DEFAULT_SCRAPE_TIMEOUT_MS,
      1,
      fail,
    );
    this.finishedCountsMaxAgeMs = integerAtLeast(
      settings.finishedCountsMaxAgeMs,
      'metrics.finishedCountsMaxAgeMs',
      DEFAULT_FINISHED_COUNTS_MAX_AGE_MS,
      0,
      fail,
    );
    const registry = settings.registry ?? (prom as typeof PromClient).register;
    if (typeof registry?.registerMetric !== 'function') fail('`metrics.registry` must be a prom-client Registry');
    if (registry.getSingleMetric('dedup_queue_workflows')) {
      fail(
        'the metrics registry already holds dedup_queue_* metrics (another DedupQueueModule?); ' +
          'give each its own registry',
      );
    }
    this.registry = registry;
    this.metrics = this.create(prom as typeof PromClient, registry);
    this.unlisten = this.lifecycle.listen((event) => this.count(event));
  }

  /** NOTE: after `beforeApplicationShutdown`, so that the workflows finishing during a graceful shutdown count. */
  onApplicationShutdown(): void {
    this.unlisten?.();
    if (!this.metrics || !this.registry) return;
    const metrics = Object.values(this.metrics) as Metrics[keyof Metrics][];
    for (const metric of metrics) this.registry.removeSingleMetric(metricName(metric));
    this.metrics = undefined;
  }

  private create(prom: typeof PromClient, registry: MetricsRegistry): Metrics {
    const registers = [registry as PromClient.Registry];
    const queues = [...this.config.queues.keys()];
    const read = () => this.snapshot();
    const abandonedRuns = () => this.scheduler.abandonedRuns();
    const strandedRuns = () => this.strandedRuns();
    const metrics: Metrics = {
      workflows: new prom.Gauge({
        name: 'dedup_queue_workflows',
        help: 'Workflows per queue and status, in the database (all processes)',
        labelNames: ['queue', 'status'],
        registers,
        async collect() {
          const snapshot = await read();
          this.reset();
          if (!snapshot) return;
          for (const queue of queues) for (const status of snapshot.statuses) this.set({ queue, status }, 0);
          for (const { queueName, status, count } of snapshot.counts) this.set({ queue: queueName, status }, count);
        },
      }),
      oldestAge: new prom.Gauge({
        name: 'dedup_queue_oldest_enqueued_age_seconds',
        help: 'How long the oldest due ENQUEUED workflow of the queue has waited (0 when none waits)',
        labelNames: ['queue'],
        registers,
        async collect() {
          const snapshot = await read();
          this.reset();
          if (!snapshot) return;
          for (const queue of queues) this.set({ queue }, 0);
          for (const [queue, seconds] of snapshot.oldestWaits) this.set({ queue }, seconds);
        },
      }),
      abandoned: new prom.Gauge({
        name: 'dedup_queue_abandoned_runs',
        help: 'Bodies of cancelled or timed-out workflows that ignore their signal and still run in this process',
        labelNames: ['queue'],
        registers,
        collect() {
          this.reset();
          for (const queue of queues) this.set({ queue }, 0);
          for (const run of abandonedRuns()) this.inc({ queue: run.queueName });
        },
      }),
      stranded: new prom.Gauge({
        name: 'dedup_queue_stranded_workflows',
        help:
          'Queued, delayed or waiting workflows of a name and version that no live executor draining their queue ' +
          'registers (all processes; checked at most once per check interval)',
        labelNames: ['queue', 'workflow', 'version'],
        registers,
        async collect() {
          const stranded = await strandedRuns();
          this.reset();
          for (const runs of stranded ?? []) {
            this.set({ queue: runs.queueName, workflow: runs.workflowName, version: String(runs.version) }, runs.count);
          }
        },
      }),
      enqueued: new prom.Counter({
        name: 'dedup_queue_enqueued_total',
        help: 'Workflows enqueued by this process',
        labelNames: ['queue'],
        registers,
      }),
      deduplicated: new prom.Counter({
        name: 'dedup_queue_deduplicated_total',
        help: 'Enqueues of this process whose deduplication ID was held, by what the duplicate policy did',
        labelNames: ['queue', 'outcome'],
        registers,
      }),
      finished: new prom.Counter({
        name: 'dedup_queue_finished_total',
        help: 'Workflows this process finished (ran to an end, cancelled, timed out or dead-lettered), by status',
        labelNames: ['queue', 'status'],
        registers,
      }),
      wait: new prom.Histogram({
        name: 'dedup_queue_wait_seconds',
        help: 'Time from when a workflow became due (enqueued, delayed, retry backoff) to its start in this process',
        labelNames: ['queue'],
        buckets: SECONDS_BUCKETS,
        registers,
      }),
      runDuration: new prom.Histogram({
        name: 'dedup_queue_run_duration_seconds',
        help: 'Duration of the runs of this process (each attempt), until their outcome was known',
        labelNames: ['queue'],
        buckets: SECONDS_BUCKETS,
        registers,
      }),
    };
    for (const queue of queues) {
      metrics.enqueued.inc({ queue }, 0);
      for (const outcome of OUTCOMES) metrics.deduplicated.inc({ queue, outcome }, 0);
      for (const status of Object.values(FINISHED_BY_EVENT)) metrics.finished.inc({ queue, status }, 0);
      metrics.wait.zero({ queue });
      metrics.runDuration.zero({ queue });
    }
    return metrics;
  }

  private count(event: LifecycleEvent): void {
    const metrics = this.metrics;
    if (!metrics) return;
    const queue = event.queueName;
    switch (event.event) {
      case 'enqueued':
        metrics.enqueued.inc({ queue });
        return;
      case 'deduplicated':
        metrics.deduplicated.inc({ queue, outcome: event.outcome });
        return;
      case 'started':
        if (event.waitSeconds !== null) metrics.wait.observe({ queue }, Math.max(0, event.waitSeconds));
        return;
      case 'retrying':
        metrics.runDuration.observe({ queue }, event.durationMs / 1000);
        return;
    }
    if ((event.event === 'completed' || event.event === 'failed') && event.durationMs !== undefined) {
      metrics.runDuration.observe({ queue }, event.durationMs / 1000);
    }
    const status = FINISHED_BY_EVENT[event.event];
    if (status) metrics.finished.inc({ queue, status });
  }

  /**
   * The stranded runs, from a report at most one check interval old (so that scrapes do not each scan the active
   * table); undefined when it could not be read in time (the gauge is left out).
   */
  private async strandedRuns(): Promise<StrandedRuns[] | undefined> {
    try {
      const report = await settleWithin(
        this.versions.report(this.versions.checkIntervalMs),
        this.scrapeTimeoutMs,
        `no report of the workflow versions within ${this.scrapeTimeoutMs} ms`,
      );
      return report.stranded;
    } catch {
      return undefined;
    }
  }

  private async recountFinished(): Promise<void> {
    const counts = await this.stats.finished(this.scrapeTimeoutMs);
    this.finishedCounts = { at: Date.now(), counts };
  }

  /** One read per scrape (the gauges collect concurrently); undefined when the database did not answer in time. */
  private snapshot(): Promise<Snapshot | undefined> {
    this.reading ??= this.read().finally(() => (this.reading = undefined));
    return this.reading;
  }

  /**
   * NOTE: stale finished counts are recounted in the background and served meanwhile, so that only the first
   * scrape (or every scrape with `finishedCountsMaxAgeMs: 0`) waits for the scan of the table.
   */
  private async read(): Promise<Snapshot | undefined> {
    try {
      const mustWait = !this.finishedCounts || this.finishedCountsMaxAgeMs === 0;
      const stale = mustWait || Date.now() - (this.finishedCounts?.at ?? 0) >= this.finishedCountsMaxAgeMs;
      if (stale && !this.recounting) {
        this.recounting = this.recountFinished().finally(() => (this.recounting = undefined));
        this.recounting.catch(() => undefined);
      }
      const [active] = await Promise.all([
        this.stats.active(this.scrapeTimeoutMs),
        mustWait ? this.recounting : undefined,
      ]);
      if (this.readFailing) this.logger.log('Metrics: reading queue depths from the database works again');
      this.readFailing = false;
      return {
        statuses: WORKFLOW_STATUSES,
        counts: [...active.counts, ...(this.finishedCounts?.counts ?? [])],
        oldestWaits: active.oldestWaits,
      };
    } catch (error) {
      if (!this.readFailing) {
        this.logger.warn(`Metrics: reading queue depths failed, the gauges are left out: ${(error as Error).message}`);
      }
      this.readFailing = true;
      return undefined;
    }
  }
}

interface Snapshot {
  statuses: readonly WorkflowStatus[];
  counts: StatusCount[];
  oldestWaits: Map<string, number>;
}

function metricName(metric: object): string {
  return (metric as unknown as { name: string }).name;
}

function integerAtLeast(
  value: unknown,
  name: string,
  fallback: number,
  min: number,
  fail: (message: string) => never,
): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || (value as number) < min) fail(`\`${name}\` must be an integer of at least ${min}`);
  return value as number;
}
