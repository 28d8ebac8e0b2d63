import { Injectable } from '@nestjs/common';
import type * as Terminus from '@nestjs/terminus';
import { DedupQueueConfig } from '../dedup-queue.config';
import { QueueDatabase } from '../database/connection/queue-database';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import { QueueScheduler } from '../scheduler/queue.scheduler';
import { WorkflowVersionsMonitor } from '../scheduler/workflow-versions.monitor';
import type { StrandedRuns } from '../interfaces/workflow-version.interface';
import { settleWithin } from '../utils/settle-within';
import { optionalPeer } from '../observability/optional-peer';

const DEFAULT_TIMEOUT_MS = 2000;

/** The result of a `@nestjs/terminus` health indicator: `{ [key]: { status: 'up' | 'down', ...details } }`. */
export type DedupQueueHealthResult<Key extends string = string> = Record<
  Key,
  { status: 'up' | 'down'; [detail: string]: unknown }
>;

/** One check of the indicator, as reported in its details. */
export interface DedupQueueCheck {
  status: 'up' | 'down';
  /** Why it is down. */
  error?: string;
  /** Down: since when (ISO 8601) the check has been failing without a success in between. */
  since?: string;
  [detail: string]: unknown;
}

type CheckName = 'database' | 'lease' | 'workers' | 'versions';

/**
 * A `@nestjs/terminus` health indicator (terminus 11+, built with its `HealthIndicatorService`) for the queue:
 * up when Postgres answers `SELECT 1` within a timeout and, in a process that drains queues, when its executor's
 * lease is fresh (renewed within `leaseMs`) and its workers run. Down reports which checks failed and since when.
 * Its `versions` detail lists the stranded runs (of a workflow version no live executor registers), which concern
 * the deployment rather than this process, so they never turn it down: `checkVersions()` is the signal for them.
 *
 * @example
 * ```ts
 * @Get('health') @HealthCheck()
 * check() { return this.health.check([() => this.queue.isHealthy()]); }
 * ```
 */
@Injectable()
export class DedupQueueHealthIndicator {
  private readonly failingSince = new Map<CheckName, Date>();

  constructor(
    private readonly config: DedupQueueConfig,
    private readonly database: QueueDatabase,
    private readonly scheduler: QueueScheduler,
    private readonly versions: WorkflowVersionsMonitor,
  ) {}

  /**
   * Checks the queue now.
   * @param key the key of the result (default `'dedup_queue'`)
   * @param options `timeoutMs`: how long the database may take to answer (default 2000)
   * @throws DedupQueueConfigurationError when `@nestjs/terminus` is not installed
   */
  async isHealthy<const Key extends string = 'dedup_queue'>(
    key: Key = 'dedup_queue' as Key,
    options: { timeoutMs?: number } = {},
  ): Promise<DedupQueueHealthResult<Key>> {
    const session = healthSession(key);
    // NOTE: side by side, so that a database that does not answer costs one timeout, not two.
    const [database, versions] = await Promise.all([
      this.checkDatabase(options.timeoutMs),
      this.versionsDetail(options.timeoutMs, this.versions.checkIntervalMs),
    ]);
    const checks: Partial<Record<CheckName, DedupQueueCheck>> = { database };
    const worker = this.scheduler.workerHealth();
    if (worker) {
      const leaseAgeMs = worker.lastHeartbeatAt ? Date.now() - worker.lastHeartbeatAt.getTime() : undefined;
      checks.lease = this.track('lease', leaseAgeMs !== undefined && leaseAgeMs < this.config.leaseMs, {
        executorId: this.config.executorId,
        lastHeartbeatAt: worker.lastHeartbeatAt?.toISOString() ?? null,
        error: `no successful heartbeat within leaseMs (${this.config.leaseMs} ms)`,
      });
      checks.workers = this.track('workers', worker.running, {
        queues: worker.queues,
        abandonedRuns: this.scheduler.abandonedRuns().length,
        error: 'the workers are not running (not started yet, or shutting down)',
      });
    }
    checks.versions = versions;
    const failed = (Object.keys(checks) as CheckName[]).filter((name) => checks[name]?.status === 'down');
    const result = failed.length === 0 ? session.up({ ...checks }) : session.down({ failed, ...checks });
    return result;
  }

  /**
   * Checks that no unfinished run waits for a workflow version that no live executor registers (see
   * `QueueService.listVersions()`): down, listing them (`strandedRuns`), while some do; e.g. for an alerting probe
   * after a deploy. Reads every queue's unfinished runs (at most `maxAgeMs` old, default 0: now).
   * @param key the key of the result (default `'dedup_queue_versions'`)
   * @throws DedupQueueConfigurationError when `@nestjs/terminus` is not installed
   */
  async checkVersions<const Key extends string = 'dedup_queue_versions'>(
    key: Key = 'dedup_queue_versions' as Key,
    options: { timeoutMs?: number; maxAgeMs?: number } = {},
  ): Promise<DedupQueueHealthResult<Key>> {
    const session = healthSession(key);
    const check = await this.versionsDetail(options.timeoutMs, options.maxAgeMs ?? 0);
    const stranded = (check.strandedRuns as StrandedRuns[] | undefined) ?? [];
    if (check.status === 'up' && stranded.length === 0) return session.up({ strandedRuns: [] });
    const error =
      check.error ??
      `${stranded.reduce((sum, runs) => sum + runs.count, 0)} unfinished run(s) of workflow versions that no live ` +
        `executor registers`;
    return session.down({ error, strandedRuns: stranded });
  }

  /** The stranded runs, as a report at most `maxAgeMs` old has them; `up` whatever they are, unless unreadable. */
  private async versionsDetail(timeoutMs = DEFAULT_TIMEOUT_MS, maxAgeMs: number): Promise<DedupQueueCheck> {
    try {
      const report = await settleWithin(
        this.versions.report(maxAgeMs),
        timeoutMs,
        `no report of the workflow versions within ${timeoutMs} ms`,
      );
      return { status: 'up', strandedRuns: report.stranded, checkedAt: report.at.toISOString() };
    } catch (error) {
      return { status: 'up', strandedRuns: undefined, error: (error as Error).message };
    }
  }

  private async checkDatabase(timeoutMs = DEFAULT_TIMEOUT_MS): Promise<DedupQueueCheck> {
    const started = Date.now();
    try {
      await settleWithin(this.database.query('SELECT 1'), timeoutMs, `no answer to SELECT 1 within ${timeoutMs} ms`);
      return this.track('database', true, { responseMs: Date.now() - started });
    } catch (error) {
      return this.track('database', false, { error: (error as Error).message });
    }
  }

  /** The check's result; remembers when it started failing, and forgets it on success. */
  private track(name: CheckName, up: boolean, details: Record<string, unknown> & { error?: string }): DedupQueueCheck {
    const { error, ...rest } = details;
    if (up) {
      this.failingSince.delete(name);
      return { status: 'up', ...rest };
    }
    const since = this.failingSince.get(name) ?? new Date();
    this.failingSince.set(name, since);
    return { status: 'down', error, since: since.toISOString(), ...rest };
  }
}

/** A terminus check of `key`. @throws DedupQueueConfigurationError when `@nestjs/terminus` is not installed */
function healthSession<const Key extends string>(key: Key) {
  const terminus = optionalPeer<typeof Terminus>('@nestjs/terminus');
  if (!terminus) {
    throw new DedupQueueConfigurationError(
      'DedupQueueHealthIndicator needs @nestjs/terminus: npm install @nestjs/terminus',
    );
  }
  return new terminus.HealthIndicatorService().check(key);
}
