import { BeforeApplicationShutdown, Injectable, Logger, OnApplicationBootstrap } from '@nestjs/common';
import { DedupQueueConfig, hasGlobalLimits } from '../dedup-queue.config';
import { WorkflowClaimer } from '../database/workflow-claimer';
import { QueueSettings } from '../queue-settings';
import { ExecutorStore } from '../database/executor.store';
import { QueueDatabase } from '../database/queue-database';
import { StepStore } from '../database/step.store';
import { InterruptPayload, WorkflowStore, parseInterruptPayload } from '../database/workflow.store';
import { WorkflowRegistry } from '../discovery/workflow.registry';
import type { InterruptReason } from '../errors/workflow-interrupted.error';
import { backoffDelayMs } from '../utils/backoff';
import { FailureLog } from '../utils/failure-log';
import { WorkflowLifecycle } from '../observability/workflow-lifecycle.events';
import { WorkflowTracer } from '../observability/workflow.tracer';
import { WorkflowCompletions } from '../workflow-completions';
import { ExecutorHeartbeat } from './executor.heartbeat';
import { NotificationListener } from './notification.listener';
import { OutcomeWriter } from './outcome.writer';
import type { AbandonedRunInfo } from '../interfaces/abandoned-run.interface';
import { QueueWorker } from './queue.worker';

/**
 * Drains every declared queue while the application runs (unless `worker: false`). At bootstrap it registers this
 * executor's lease, recovers what an earlier process with the same executor ID left, and starts one worker per
 * queue, woken by enqueue notifications and a polling timer. At shutdown it stops claiming, waits for running
 * workflows up to `shutdownGraceMs`, interrupts the rest (they stay PENDING) and gives up its lease so that the
 * other executors recover them at once.
 */
@Injectable()
export class QueueScheduler implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('DedupQueueScheduler');
  private readonly workers = new Map<string, QueueWorker>();
  private readonly pollFailures = new FailureLog(this.logger);
  private outcomes?: OutcomeWriter;
  private listener?: NotificationListener;
  private heartbeat?: ExecutorHeartbeat;
  private executors?: ExecutorStore;
  private pollTimer?: NodeJS.Timeout;
  /** Claims wait while the scheduler puts back what a claim with a lost answer took. */
  private claimsHeld = false;
  /** No claim before this executor's lease is registered and what it left earlier is recovered. */
  private leaseReady = false;
  private reconciling?: Promise<void>;
  private stopping = false;

  constructor(
    private readonly config: DedupQueueConfig,
    private readonly database: QueueDatabase,
    private readonly store: WorkflowStore,
    private readonly registry: WorkflowRegistry,
    private readonly completions: WorkflowCompletions,
    private readonly settings: QueueSettings,
    private readonly lifecycle: WorkflowLifecycle,
    private readonly tracer: WorkflowTracer,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    if (!this.config.worker) return;
    const queues = [...this.config.workerQueues];
    this.outcomes = new OutcomeWriter(
      this.store,
      this.config.executorId,
      (queueName) => hasGlobalLimits(this.settings.effective(queueName)),
      (queueName, outcomes) => this.workers.get(queueName)?.claimWithOutcomes(outcomes),
    );
    const steps = new StepStore(this.database, this.config.leaseMs);
    const claimer = new WorkflowClaimer(this.database);
    for (const queueName of queues) {
      this.workers.set(
        queueName,
        new QueueWorker(queueName, {
          store: this.store,
          claimer,
          settings: this.settings,
          steps,
          registry: this.registry,
          outcomes: this.outcomes,
          completions: this.completions,
          executorId: this.config.executorId,
          claimsAllowed: () => this.leaseReady && !this.claimsHeld,
          claimMayHaveBeenLost: () => this.reconcileLostClaims(),
          lifecycle: this.lifecycle,
          tracer: this.tracer,
        }),
      );
    }
    const executors = new ExecutorStore(this.database);
    this.executors = executors;
    this.stopping = false;
    this.heartbeat = new ExecutorHeartbeat(
      this.config,
      executors,
      this.store,
      () => this.interruptNotOwned(),
      this.lifecycle,
    );
    this.listener = new NotificationListener(
      this.database,
      this.config,
      new Map([
        [this.database.wakeUpChannel, (queueName) => this.wake(queueName)],
        [
          this.database.cancelChannel,
          (payload) => (payload ? this.cancelled(parseInterruptPayload(payload)) : void this.interruptNotOwned()),
        ],
        [this.database.controlChannel, () => void this.refreshSettings()],
      ]),
    );
    // NOTE: LISTEN is set up while the lease registers; the first claim follows both, so no wake-up is missed.
    await Promise.all([this.heartbeat.start(), this.listener.start()]);
    this.leaseReady = true;
    this.pollTimer = setInterval(() => void this.poll(), this.config.pollIntervalMs);
    this.pollTimer.unref();
    this.wake(undefined);
    this.logger.log(
      `Executor ${this.config.executorId} draining ${queues.map((name) => `"${name}"`).join(', ')}`,
    );
  }

  async beforeApplicationShutdown(): Promise<void> {
    if (!this.outcomes) return;
    this.stopping = true;
    clearInterval(this.pollTimer);
    for (const worker of this.workers.values()) worker.stop();
    await this.listener?.stop();
    const finished = await Promise.all(
      [...this.workers.values()].map((worker) => worker.waitForRunning(this.config.shutdownGraceMs)),
    );
    const abandoned = this.abandonedRuns().length;
    if (abandoned > 0) this.logger.warn(`Not waiting for ${abandoned} abandoned body(ies) of cancelled workflows`);
    if (finished.includes(false)) {
      const left = [...this.workers.values()].reduce((sum, worker) => sum + worker.runningCount, 0);
      this.logger.warn(`Shutdown grace period over; ${left} workflow(s) still running stay PENDING for recovery`);
      this.interruptAll('shutdown');
    }
    this.outcomes.close();
    await this.outcomes.drained();
    await this.heartbeat?.stop(true);
    this.outcomes = undefined;
  }

  /**
   * For the health indicator: undefined when this process drains no queues; otherwise when its lease was last
   * renewed and whether its workers run (started, and not shutting down).
   */
  workerHealth(): { running: boolean; queues: string[]; lastHeartbeatAt?: Date } | undefined {
    if (!this.config.worker) return undefined;
    return {
      running: this.outcomes !== undefined && !this.stopping,
      queues: [...this.workers.keys()],
      lastHeartbeatAt: this.heartbeat?.lastRenewedAt,
    };
  }

  /**
   * A polling tick: picks up queue changes and looks for work; without notifications, also learns which running
   * workflows were cancelled or taken elsewhere.
   */
  private async poll(): Promise<void> {
    await this.refreshSettings();
    if (this.listener && !this.listener.listening) await this.interruptNotOwned();
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
      this.workers.get(queueName)?.wake();
    }
  }

  /**
   * A workflow was CANCELLED in Postgres (by this process, or announced on the cancel channel): the worker running
   * that run of it here aborts its signal and frees its slot at once.
   */
  cancelled({ workflowId, reason, attempt }: InterruptPayload): void {
    for (const worker of this.workers.values()) worker.release(workflowId, reason, attempt);
  }

  /** The bodies of cancelled or timed-out workflows that still run in this process, outside any slot. */
  abandonedRuns(): AbandonedRunInfo[] {
    return [...this.workers.values()].flatMap((worker) => worker.abandonedRuns());
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
    if (!this.executors) return;
    try {
      for (const { workflowId, reason, attempt } of await this.executors.notOwned(this.config.executorId, this.runningIds())) {
        if (reason === 'ownership-lost') this.interrupt({ workflowId, reason });
        else this.cancelled({ workflowId, reason, attempt });
      }
    } catch (error) {
      this.pollFailures.failed('Checking the running workflows', error);
    }
  }

  /**
   * A claim failed with its connection, so it may have committed without this process learning what it took. Holds
   * every claim of this process, waits for those in flight, then puts back whatever is PENDING here but not running.
   */
  private reconcileLostClaims(): void {
    this.claimsHeld = true;
    this.reconciling ??= this.releaseUnknownClaims().finally(() => {
      this.reconciling = undefined;
      this.claimsHeld = false;
      this.wake(undefined);
    });
  }

  private async releaseUnknownClaims(): Promise<void> {
    for (let attempt = 1; this.executors && !this.stopping; attempt++) {
      await Promise.all([...this.workers.values()].map((worker) => worker.claimSettled()));
      try {
        const released = await this.executors.releaseUnknown(this.config.executorId, this.runningIds());
        if (released.length > 0) {
          this.logger.warn(`Put back ${released.length} workflow(s) taken by a claim whose answer was lost with its connection`);
        }
        return;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, backoffDelayMs(attempt, { initialDelayMs: 250, maxDelayMs: 5000 })));
      }
    }
  }

  private runningIds(): string[] {
    return [...this.workers.values()].flatMap((worker) => worker.runningIds());
  }

  private interruptAll(reason: InterruptReason): void {
    for (const worker of this.workers.values()) worker.interruptAll(reason);
  }
}
