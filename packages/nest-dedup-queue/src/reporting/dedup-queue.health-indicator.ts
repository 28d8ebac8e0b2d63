import { Injectable } from '@nestjs/common';
import type * as Terminus from '@nestjs/terminus';
import { DedupQueueConfig } from '../dedup-queue.config';
import { QueueDatabase } from '../database/queue-database';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import { QueueScheduler } from '../scheduler/queue.scheduler';
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

type CheckName = 'database' | 'lease' | 'workers';

/**
 * A `@nestjs/terminus` health indicator (terminus 11+, built with its `HealthIndicatorService`) for the queue:
 * up when Postgres answers `SELECT 1` within a timeout and, in a process that drains queues, when its executor's
 * lease is fresh (renewed within `leaseMs`) and its workers run. Down reports which checks failed and since when.
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
    const terminus = optionalPeer<typeof Terminus>('@nestjs/terminus');
    if (!terminus) {
      throw new DedupQueueConfigurationError(
        'DedupQueueHealthIndicator needs @nestjs/terminus: npm install @nestjs/terminus',
      );
    }
    const checks: Partial<Record<CheckName, DedupQueueCheck>> = {
      database: await this.checkDatabase(options.timeoutMs),
    };
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
    const failed = (Object.keys(checks) as CheckName[]).filter((name) => checks[name]?.status === 'down');
    const session = new terminus.HealthIndicatorService().check(key);
    const result = failed.length === 0 ? session.up({ ...checks }) : session.down({ failed, ...checks });
    return result;
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
