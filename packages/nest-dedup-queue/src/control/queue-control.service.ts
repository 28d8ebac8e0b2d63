import { Injectable } from '@nestjs/common';
import {
  DedupQueueConfig,
  QUEUE_LIMIT_KEYS,
  assertQueueDeclared,
  queueWideLimit,
  resolveLimits,
} from '../dedup-queue.config';
import { QueueControlStore } from '../database/queues/queue-control.store';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import type { QueueLimits } from '../interfaces/queue-options.interface';
import { QueueSettings } from '../queue-settings';
import { unknownKey } from '../utils/known-keys';

/**
 * Controls queues at run time for every process sharing the database: pause, resume, limits, and what applies now.
 * `QueueService`'s queue-control methods delegate here.
 */
@Injectable()
export class QueueControlService {
  constructor(
    private readonly config: DedupQueueConfig,
    private readonly control: QueueControlStore,
    private readonly settings: QueueSettings,
  ) {}

  /** See `QueueService.pauseQueue`. */
  async pauseQueue(queueName: string): Promise<void> {
    assertQueueDeclared(this.config, queueName);
    await this.control.setPaused(queueName, true);
  }

  /** See `QueueService.resumeQueue`. */
  async resumeQueue(queueName: string): Promise<void> {
    assertQueueDeclared(this.config, queueName);
    await this.control.setPaused(queueName, false);
  }

  /** See `QueueService.setQueueLimits`. */
  async setQueueLimits(queueName: string, limits: { [K in keyof QueueLimits]?: QueueLimits[K] | null }): Promise<void> {
    assertQueueDeclared(this.config, queueName);
    const unknown = unknownKey(limits ?? {}, QUEUE_LIMIT_KEYS);
    if (unknown) throw new InvalidArgumentError(`limits.${unknown.key}`, unknown.reason);
    const given = Object.fromEntries(
      Object.entries(limits ?? {}).filter(([, value]) => value !== null && value !== undefined),
    );
    resolveLimits(queueName, given, 'limits.', (message) => {
      throw new InvalidArgumentError('limits', message);
    });
    const shards = this.config.queues.get(queueName)?.shards;
    const wide = shards && queueWideLimit(given);
    if (wide) {
      throw new InvalidArgumentError(
        `limits.${wide}`,
        `cannot hold across the ${shards} shards of queue "${queueName}"; a queue with shards takes only ` +
          '`workerConcurrency`',
      );
    }
    await this.control.setLimits(queueName, limits);
  }

  /** See `QueueService.getQueueSettings`. */
  async getQueueSettings(queueName: string): Promise<QueueLimits & { paused: boolean }> {
    assertQueueDeclared(this.config, queueName);
    await this.settings.refresh();
    const { name: _name, shards: _shards, ...settings } = this.settings.effective(queueName);
    return settings;
  }
}
