import { Injectable, OnModuleInit } from '@nestjs/common';
import { logicalQueueName } from './utils/queue-shards';
import { DedupQueueConfig, QUEUE_WIDE_LIMIT_KEYS, ResolvedQueue, queueWideLimit } from './dedup-queue.config';
import { QueueControlStore, QueueOverrides } from './database/queues/queue-control.store';
import { ModuleLogger } from './utils/module-logger';

/** A queue's limits as they apply now: declared, with run-time overrides on top, and whether it is paused. */
export interface EffectiveQueue extends ResolvedQueue {
  paused: boolean;
}

/**
 * The effective settings of the declared queues in this process. Refreshed from Postgres when a control
 * notification arrives and on every polling tick, so a change made anywhere applies everywhere within a second.
 * A queue declared with shards ignores a stored override of a queue-wide limit (set before it declared them), said
 * once at boot.
 */
@Injectable()
export class QueueSettings implements OnModuleInit {
  private overrides = new Map<string, QueueOverrides>();
  /** `effective` per queue, made once per read of the overrides (workers ask for it several times per workflow). */
  private readonly computed = new Map<string, EffectiveQueue>();
  private refreshing?: Promise<void>;
  private nextRead?: Promise<void>;
  private readonly logger = new ModuleLogger('DedupQueueSettings');

  constructor(
    private readonly config: DedupQueueConfig,
    private readonly control: QueueControlStore,
  ) {}

  async onModuleInit(): Promise<void> {
    await this.control.ensure([...this.config.queues.keys()]);
    await this.refresh();
    for (const [name, { shards }] of this.config.queues) {
      const wide = shards && queueWideLimit(this.overrides.get(name)?.limits ?? {});
      if (wide) {
        this.logger.warn(
          `Queue "${name}" declares ${shards} shards and ignores its run-time \`${wide}\` override; clear it with ` +
            `setQueueLimits('${name}', { ${wide}: null })`,
        );
      }
    }
  }

  /**
   * Re-reads the overrides, in a read that starts after the call (a read already in flight may predate a change the
   * caller just made); the calls made while one read waits to start share it.
   */
  refresh(): Promise<void> {
    this.nextRead ??= (this.refreshing ?? Promise.resolve())
      .catch(() => undefined)
      .then(() => {
        this.nextRead = undefined;
        return this.read();
      });
    return this.nextRead;
  }

  private read(): Promise<void> {
    this.refreshing = this.control
      .load()
      .then((overrides) => {
        this.overrides = overrides;
        this.computed.clear();
      })
      .finally(() => (this.refreshing = undefined));
    return this.refreshing;
  }

  /**
   * The queue's settings now (of the queue a shard's stored name belongs to); the same object until the overrides are
   * read again (do not change it).
   */
  effective(queueName: string): Readonly<EffectiveQueue> {
    let queue = this.computed.get(queueName);
    if (!queue) this.computed.set(queueName, (queue = this.compute(logicalQueueName(queueName))));
    return queue;
  }

  private compute(queueName: string): EffectiveQueue {
    const declared = this.config.queues.get(queueName) as ResolvedQueue;
    const override = this.overrides.get(queueName);
    const limits = { ...override?.limits };
    if (declared.shards) for (const key of QUEUE_WIDE_LIMIT_KEYS) delete limits[key];
    const concurrency = limits.concurrency ?? declared.concurrency;
    return {
      ...declared,
      ...limits,
      concurrency,
      workerConcurrency: limits.workerConcurrency ?? declared.workerConcurrency,
      rateLimit: limits.rateLimit
        ? { ...limits.rateLimit, perPartition: limits.rateLimit.perPartition ?? declared.rateLimit?.perPartition }
        : declared.rateLimit,
      paused: override?.paused ?? false,
    };
  }
}
