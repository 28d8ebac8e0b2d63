import { BeforeApplicationShutdown, Injectable, OnApplicationBootstrap } from '@nestjs/common';
import { DedupQueueConfig } from '../dedup-queue.config';
import { WaitingStore } from '../database/waiting/waiting.store';
import { FailureLog } from '../utils/failure-log';
import { ModuleLogger } from '../utils/module-logger';
import { logicalQueueName, storedQueueNames } from '../utils/queue-shards';

/** How many waiting workflows one statement makes due at most. */
const PROMOTE_BATCH = 1000;

interface WakeUpTimer {
  at: number;
  timer: NodeJS.Timeout;
}

/**
 * Makes waiting workflows due when their time comes, in every process that drains their queue: once per heartbeat
 * interval, and at the exact wake-up time of the next one it knows (the next one of its queue, as the last look
 * found it, or one this process just suspended). Making due is one statement per queue (WAITING to ENQUEUED, by the
 * database's clock, skipping rows another process is making due), followed by a wake-up of the queue's workers
 * everywhere; the claim then takes them like any due workflow.
 */
@Injectable()
export class WaitingWaker implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new ModuleLogger('DedupQueueScheduler');
  private readonly failures = new FailureLog(this.logger);
  private readonly timers = new Map<string, WakeUpTimer>();
  private readonly promoting = new Map<string, Promise<void>>();
  /** Queues to look at again once the look in flight is over. */
  private readonly again = new Set<string>();
  private tick?: NodeJS.Timeout;
  private started = false;

  constructor(
    private readonly config: DedupQueueConfig,
    private readonly store: WaitingStore,
  ) {}

  onApplicationBootstrap(): void {
    if (!this.config.worker) return;
    this.started = true;
    this.promoteAll();
    this.tick = setInterval(() => this.promoteAll(), this.config.heartbeatIntervalMs);
    this.tick.unref();
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.started = false;
    clearInterval(this.tick);
    for (const { timer } of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    await Promise.all(this.promoting.values());
  }

  /** A workflow of `queueName` waits until `inMs` from now: look for due workflows of that queue then. */
  expect(queueName: string, inMs: number): void {
    this.wakeAt(queueName, Date.now() + inMs);
  }

  private promoteAll(): void {
    for (const queueName of this.config.workerQueues) {
      for (const storedQueueName of storedQueueNames(this.config, queueName)) this.promote(storedQueueName);
    }
  }

  private wakeAt(queueName: string, at: number): void {
    if (!this.started || !this.config.workerQueues.has(logicalQueueName(queueName))) return;
    const current = this.timers.get(queueName);
    if (current && current.at <= at) return;
    clearTimeout(current?.timer);
    const timer = setTimeout(
      () => {
        this.timers.delete(queueName);
        this.promote(queueName);
      },
      Math.min(Math.max(0, at - Date.now()), this.config.heartbeatIntervalMs),
    );
    timer.unref();
    this.timers.set(queueName, { at, timer });
  }

  private promote(queueName: string): void {
    if (!this.started) return;
    if (this.promoting.has(queueName)) {
      this.again.add(queueName);
      return;
    }
    const promoting = this.promoteDue(queueName).finally(() => {
      this.promoting.delete(queueName);
      if (this.again.delete(queueName)) this.promote(queueName);
    });
    this.promoting.set(queueName, promoting);
  }

  private async promoteDue(queueName: string): Promise<void> {
    try {
      const { woken, nextAt, now } = await this.store.promoteDue(queueName, PROMOTE_BATCH);
      if (woken > 0) {
        this.logger.debug(`${woken} waiting workflow(s) of queue "${queueName}" woke up`);
        await this.store.wakeWorkers(queueName);
      }
      this.failures.succeeded();
      if (woken === PROMOTE_BATCH) this.wakeAt(queueName, Date.now());
      else if (nextAt) this.wakeAt(queueName, Date.now() + (nextAt.getTime() - now.getTime()));
    } catch (error) {
      this.failures.failed(`Waking the waiting workflows of queue "${queueName}"`, error);
    }
  }
}
