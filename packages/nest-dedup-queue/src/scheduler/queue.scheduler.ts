import { BeforeApplicationShutdown, Injectable, OnApplicationBootstrap } from '@nestjs/common';
import { DedupQueueConfig } from '../dedup-queue.config';
import { QueueSettings } from '../queue-settings';
import { ExecutorStore, type HeldRun } from '../database/executors/executor.store';
import { QueueDatabase } from '../database/connection/queue-database';
import type { InterruptPayload } from '../database/workflows/interrupt-payload';
import type { InterruptReason } from '../errors/workflow-interrupted.error';
import { backoffDelayMs } from '../utils/backoff';
import { FailureLog } from '../utils/failure-log';
import { CancelHints } from './cancel-hints';
import { ExecutorHeartbeat } from './executor.heartbeat';
import { NotificationListener } from '../notifications/notification.listener';
import { OutcomeWriter } from './outcome.writer';
import type { AbandonedRunInfo } from '../interfaces/abandoned-run.interface';
import type { QueueWorker } from './queue.worker';
import { QueueWorkerFactory } from './queue-worker.factory';
import { ModuleLogger } from '../utils/module-logger';
import { logicalQueueName, storedQueueNames } from '../utils/queue-shards';

/**
 * Drains every declared queue while the application runs (unless `worker: false`). At bootstrap it registers this
 * executor's lease, recovers what an earlier process with the same executor ID left, and starts one worker per
 * queue, woken by enqueue notifications and a polling timer. At shutdown it stops claiming, waits for running
 * workflows up to `shutdownGraceMs`, interrupts the rest (they stay PENDING) and gives up its lease so that the
 * other executors recover them at once. Its collaborators (outcome writer, lease heartbeat, notification listener,
 * executor store, worker factory) are providers of the module, so a test can replace any of them.
 */
@Injectable()
export class QueueScheduler implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new ModuleLogger('DedupQueueScheduler');
  private readonly workers = new Map<string, QueueWorker>();
  private readonly pollFailures = new FailureLog(this.logger);
  /** From bootstrap to the end of shutdown, in a worker process. */
  private started = false;
  private pollTimer?: NodeJS.Timeout;
  /** The queues whose claims wait while the scheduler puts back what a claim of theirs with a lost answer took. */
  private readonly claimsHeld = new Set<string>();
  /** No claim before this executor's lease is registered and what it left earlier is recovered. */
  private leaseReady = false;
  private readonly reconciling = new Map<string, Promise<void>>();
  private stopping = false;
  private readonly cancelHints = new CancelHints({
    queuesThatMayHold: (workflowId) =>
      [...this.workers.values()].flatMap((worker) => worker.storedNamesThatMayHold(workflowId)),
    lookUp: (runs) => this.executors.notOwned(this.config.executorId, runs),
    release: (cancelled) => this.cancelled(cancelled),
    endedElsewhere: () => this.workers.forEach((worker) => worker.endedElsewhere()),
    checkEveryRun: () => this.interruptNotOwned(),
    active: () => this.started,
    failed: (error) => this.pollFailures.failed('Confirming announced cancels', error),
  });

  constructor(
    private readonly config: DedupQueueConfig,
    private readonly database: QueueDatabase,
    private readonly settings: QueueSettings,
    private readonly outcomes: OutcomeWriter,
    private readonly executors: ExecutorStore,
    private readonly heartbeat: ExecutorHeartbeat,
    private readonly listener: NotificationListener,
    private readonly workerFactory: QueueWorkerFactory,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    if (!this.config.worker) return;
    const queues = [...this.config.workerQueues];
    this.outcomes.attachClaims((storedQueueName, outcomes) =>
      this.workers.get(logicalQueueName(storedQueueName))?.claimWithOutcomes(outcomes),
    );
    for (const queueName of queues) {
      this.workers.set(
        queueName,
        this.workerFactory.create(queueName, {
          claimsAllowed: () => this.leaseReady && !this.claimsHeld.has(queueName),
          claimMayHaveBeenLost: () => this.reconcileLostClaims(queueName),
        }),
      );
    }
    this.started = true;
    this.stopping = false;
    const listening = this.listener.start(
      new Map([
        [this.database.wakeUpChannel, (queueName) => this.wake(queueName)],
        [this.database.cancelChannel, (payload) => this.cancelHints.announce(payload)],
        [this.database.controlChannel, () => void this.refreshSettings()],
      ]),
    );
    // NOTE: LISTEN is set up while the lease registers; the first claim follows both, so no wake-up is missed.
    await Promise.all([this.heartbeat.start(() => this.interruptNotOwned()), listening]);
    this.leaseReady = true;
    this.pollTimer = setInterval(() => void this.poll(), this.config.pollIntervalMs);
    this.pollTimer.unref();
    this.wake(undefined);
    this.logger.log(`Executor ${this.config.executorId} draining ${queues.map((name) => `"${name}"`).join(', ')}`);
  }

  async beforeApplicationShutdown(): Promise<void> {
    if (!this.started) return;
    this.stopping = true;
    clearInterval(this.pollTimer);
    for (const worker of this.workers.values()) worker.stop();
    await this.listener.stop();
    const running = this.runningCount();
    if (running > 0) {
      this.logger.log(
        `Shutting down: waiting up to ${this.config.shutdownGraceMs} ms for ${running} running workflow(s)`,
      );
    }
    const finished = await Promise.all(
      [...this.workers.values()].map((worker) => worker.waitForRunning(this.config.shutdownGraceMs)),
    );
    const abandoned = this.abandonedRuns().length;
    if (abandoned > 0) this.logger.warn(`Not waiting for ${abandoned} abandoned body(ies) of cancelled workflows`);
    if (finished.includes(false)) {
      this.logger.warn(
        `Shutdown grace period over; ${this.runningCount()} workflow(s) still running stay PENDING for recovery`,
      );
      this.interruptAll('shutdown');
    }
    this.outcomes.close();
    await this.outcomes.drained();
    await this.heartbeat.stop(true);
    this.started = false;
  }

  /**
   * For the health indicator: undefined when this process drains no queues; otherwise when its lease was last
   * renewed and whether its workers run (started, and not shutting down).
   */
  workerHealth(): { running: boolean; queues: string[]; lastHeartbeatAt?: Date } | undefined {
    if (!this.config.worker) return undefined;
    return {
      running: this.started && !this.stopping,
      queues: [...this.workers.keys()],
      lastHeartbeatAt: this.heartbeat.lastRenewedAt,
    };
  }

  /**
   * A polling tick: picks up queue changes and looks for work; without notifications (on Citus, while a node's
   * LISTEN connection is down), also learns which running workflows were cancelled or taken elsewhere.
   */
  private async poll(): Promise<void> {
    await this.refreshSettings();
    if (!this.listener.listening) await this.interruptNotOwned();
  }

  /** Picks up queue changes made anywhere (pause, resume, new limits), then looks for work in every queue. */
  private async refreshSettings(): Promise<void> {
    await this.settings.refresh().catch((error: unknown) => this.pollFailures.failed('Reading queue settings', error));
    this.wake(undefined);
  }

  private wake(queueName: string | undefined): void {
    if (queueName === undefined) {
      for (const worker of this.workers.values()) worker.wake();
    } else {
      this.workers.get(logicalQueueName(queueName))?.wake(queueName);
    }
  }

  /**
   * A workflow is CANCELLED in Postgres (by this process, or announced on the cancel channel and confirmed in the
   * database): the worker running that run of it here aborts its signal and frees its slot at once.
   */
  cancelled({ workflowId, reason, attempt }: InterruptPayload): void {
    for (const worker of this.workers.values()) worker.release(workflowId, reason, attempt);
  }

  /** The bodies of cancelled or timed-out workflows that still run in this process, outside any slot. */
  abandonedRuns(): AbandonedRunInfo[] {
    return [...this.workers.values()].flatMap((worker) => worker.abandonedRuns());
  }

  private runningCount(): number {
    return [...this.workers.values()].reduce((sum, worker) => sum + worker.runningCount, 0);
  }

  private interrupt({ workflowId, reason }: { workflowId: string; reason: InterruptReason }): void {
    for (const worker of this.workers.values()) worker.interrupt(workflowId, reason);
  }

  /**
   * Interrupts the running workflows that are no longer PENDING under this executor: cancelled or timed out while
   * notifications did not arrive, or recovered elsewhere after this executor's lease was taken away. Those still
   * owned run on and record normally.
   */
  private async interruptNotOwned(): Promise<void> {
    if (!this.started) return;
    try {
      for (const { workflowId, reason, attempt } of await this.executors.notOwned(
        this.config.executorId,
        this.heldRuns(),
      )) {
        if (reason === 'ownership-lost') this.interrupt({ workflowId, reason });
        else this.cancelled({ workflowId, reason, attempt });
      }
    } catch (error) {
      this.pollFailures.failed('Checking the running workflows', error);
    }
  }

  /**
   * A claim of `queueName` failed with its connection, so it may have committed without this process learning what
   * it took. Holds that queue's claims, waits for those in flight, then puts back whatever of it is PENDING here but
   * not running. The other queues claim on: on Citus a queue whose node is down must not stop those of other nodes.
   */
  private reconcileLostClaims(queueName: string): void {
    this.claimsHeld.add(queueName);
    if (this.reconciling.has(queueName)) return;
    this.reconciling.set(
      queueName,
      this.releaseUnknownClaims(queueName).finally(() => {
        this.reconciling.delete(queueName);
        this.claimsHeld.delete(queueName);
        this.wake(queueName);
      }),
    );
  }

  private async releaseUnknownClaims(queueName: string): Promise<void> {
    const worker = this.workers.get(queueName);
    for (let attempt = 1; worker && this.started && !this.stopping; attempt++) {
      await worker.claimSettled();
      try {
        const released: string[] = [];
        for (const storedQueueName of storedQueueNames(this.config, queueName)) {
          released.push(
            ...(await this.executors.releaseUnknown(this.config.executorId, storedQueueName, this.runningIds())),
          );
        }
        if (released.length > 0) {
          this.logger.warn(
            `Put back ${released.length} workflow(s) of queue "${queueName}" taken by a claim whose answer was ` +
              `lost with its connection`,
          );
        }
        return;
      } catch {
        await new Promise((resolve) =>
          setTimeout(resolve, backoffDelayMs(attempt, { initialDelayMs: 250, maxDelayMs: 5000 })),
        );
      }
    }
  }

  private runningIds(): string[] {
    return this.heldRuns().map((run) => run.workflowId);
  }

  /** The workflows the workers know (running, being recorded, buffered), each with its queue. */
  private heldRuns(): HeldRun[] {
    return [...this.workers.values()].flatMap((worker) => worker.heldRuns());
  }

  private interruptAll(reason: InterruptReason): void {
    for (const worker of this.workers.values()) worker.interruptAll(reason);
  }
}
