import { BeforeApplicationShutdown, Injectable, Logger, OnApplicationBootstrap } from '@nestjs/common';
import { DedupQueueConfig, hasGlobalLimits } from '../dedup-queue.config';
import { WorkflowClaimer } from '../database/workflow-claimer';
import { QueueSettings } from '../queue-settings';
import { ExecutorStore } from '../database/executor.store';
import { QueueDatabase } from '../database/queue-database';
import { StepStore } from '../database/step.store';
import { WorkflowStore, parseInterruptPayload } from '../database/workflow.store';
import { WorkflowRegistry } from '../discovery/workflow.registry';
import type { InterruptReason } from '../errors/workflow-interrupted.error';
import { WorkflowLifecycle } from '../observability/workflow-lifecycle.events';
import { WorkflowTracer } from '../observability/workflow.tracer';
import { WorkflowCompletions } from '../workflow-completions';
import { ExecutorHeartbeat } from './executor.heartbeat';
import { NotificationListener } from './notification.listener';
import { OutcomeWriter } from './outcome.writer';
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
  private outcomes?: OutcomeWriter;
  private listener?: NotificationListener;
  private heartbeat?: ExecutorHeartbeat;
  private pollTimer?: NodeJS.Timeout;
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
    this.outcomes = new OutcomeWriter(this.store, this.config.executorId, (queueName) =>
      hasGlobalLimits(this.settings.effective(queueName)),
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
          lifecycle: this.lifecycle,
          tracer: this.tracer,
        }),
      );
    }
    const executors = new ExecutorStore(this.database);
    this.heartbeat = new ExecutorHeartbeat(
      this.config,
      executors,
      this.store,
      () => this.reclaimAfterLostLease(executors),
      this.lifecycle,
    );
    await this.heartbeat.start();
    this.listener = new NotificationListener(
      this.database,
      new Map([
        [this.database.wakeUpChannel, (queueName) => this.wake(queueName)],
        [this.database.cancelChannel, (payload) => payload && this.interrupt(parseInterruptPayload(payload))],
        [this.database.controlChannel, () => void this.refreshSettings()],
      ]),
    );
    await this.listener.start();
    this.pollTimer = setInterval(() => void this.refreshSettings(), this.config.pollIntervalMs);
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

  /** Picks up queue changes made anywhere (pause, resume, new limits), then looks for work in every queue. */
  private async refreshSettings(): Promise<void> {
    await this.settings.refresh().catch((error: Error) => this.logger.warn(`Reading queue settings failed: ${error.message}`));
    this.wake(undefined);
  }

  private wake(queueName: string | undefined): void {
    if (queueName === undefined) {
      for (const worker of this.workers.values()) worker.wake();
    } else {
      this.workers.get(queueName)?.wake();
    }
  }

  private interrupt({ workflowId, reason }: { workflowId: string; reason: InterruptReason }): void {
    for (const worker of this.workers.values()) worker.interrupt(workflowId, reason);
  }

  /**
   * After this executor's lease was taken away and renewed: interrupts the running workflows that were recovered
   * elsewhere meanwhile; those still PENDING under this executor (a sweep skipped them) run on and record normally.
   */
  private async reclaimAfterLostLease(executors: ExecutorStore): Promise<void> {
    const running = [...this.workers.values()].flatMap((worker) => worker.runningIds());
    const stillOwned = new Set(await executors.stillPending(this.config.executorId, running));
    for (const workflowId of running) {
      if (!stillOwned.has(workflowId)) this.interrupt({ workflowId, reason: 'ownership-lost' });
    }
  }

  private interruptAll(reason: InterruptReason): void {
    for (const worker of this.workers.values()) worker.interruptAll(reason);
  }
}
