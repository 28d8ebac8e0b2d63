import { Injectable, OnModuleInit } from '@nestjs/common';
import { DedupQueueConfig, ResolvedQueue } from './dedup-queue.config';
import { QueueControlStore, QueueOverrides } from './database/queue-control.store';

/** A queue's limits as they apply now: declared, with run-time overrides on top, and whether it is paused. */
export interface EffectiveQueue extends ResolvedQueue {
  paused: boolean;
}

/**
 * The effective settings of the declared queues in this process. Refreshed from Postgres when a control
 * notification arrives and on every polling tick, so a change made anywhere applies everywhere within a second.
 */
@Injectable()
export class QueueSettings implements OnModuleInit {
  private overrides = new Map<string, QueueOverrides>();

  constructor(
    private readonly config: DedupQueueConfig,
    private readonly control: QueueControlStore,
  ) {}

  async onModuleInit(): Promise<void> {
    await this.control.ensure([...this.config.queues.keys()]);
    await this.refresh();
  }

  async refresh(): Promise<void> {
    this.overrides = await this.control.load();
  }

  effective(queueName: string): EffectiveQueue {
    const declared = this.config.queues.get(queueName) as ResolvedQueue;
    const override = this.overrides.get(queueName);
    const limits = override?.limits ?? {};
    const concurrency = limits.concurrency ?? declared.concurrency;
    return {
      ...declared,
      ...limits,
      concurrency,
      workerConcurrency: limits.workerConcurrency ?? declared.workerConcurrency,
      rateLimit: limits.rateLimit ? { ...declared.rateLimit, ...limits.rateLimit } : declared.rateLimit,
      paused: override?.paused ?? false,
    };
  }
}
