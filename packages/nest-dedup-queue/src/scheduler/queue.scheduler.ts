import {
  BeforeApplicationShutdown,
  Injectable,
  Logger,
  OnApplicationBootstrap,
} from '@nestjs/common';
import { DedupQueueConfig } from '../dedup-queue.config';
import { QueueDatabase } from '../database/queue-database';
import { WorkflowStore } from '../database/workflow.store';
import { WorkflowRegistry } from '../discovery/workflow.registry';
import { WorkflowCompletions } from '../workflow-completions';
import { OutcomeWriter } from './outcome.writer';
import { QueueWorker } from './queue.worker';
import { WakeUpListener } from './wake-up.listener';

/**
 * Drains every declared queue while the application runs (unless `worker: false`): starts at bootstrap, wakes a
 * queue's worker on each enqueue notification and on a polling timer, and at shutdown stops claiming and waits for
 * running workflows up to `shutdownGraceMs`. Workflows still running after that stay PENDING.
 */
@Injectable()
export class QueueScheduler implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('DedupQueueScheduler');
  private readonly workers = new Map<string, QueueWorker>();
  private outcomes?: OutcomeWriter;
  private listener?: WakeUpListener;
  private pollTimer?: NodeJS.Timeout;

  constructor(
    private readonly config: DedupQueueConfig,
    private readonly database: QueueDatabase,
    private readonly store: WorkflowStore,
    private readonly registry: WorkflowRegistry,
    private readonly completions: WorkflowCompletions,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    if (!this.config.worker) return;
    const queues = [...this.config.queues.values()];
    const globallyLimited = new Set(queues.filter((queue) => queue.concurrency !== undefined).map((queue) => queue.name));
    this.outcomes = new OutcomeWriter(this.store, this.config.executorId, globallyLimited);
    for (const queue of queues) {
      this.workers.set(
        queue.name,
        new QueueWorker(queue, {
          store: this.store,
          registry: this.registry,
          outcomes: this.outcomes,
          completions: this.completions,
          executorId: this.config.executorId,
        }),
      );
    }
    this.listener = new WakeUpListener(this.database, (queueName) => this.wake(queueName));
    await this.listener.start();
    this.pollTimer = setInterval(() => this.wake(undefined), this.config.pollIntervalMs);
    this.pollTimer.unref();
    this.wake(undefined);
    this.logger.log(
      `Executor ${this.config.executorId} draining ${queues.map((queue) => `"${queue.name}"`).join(', ') || 'no queues'}`,
    );
  }

  async beforeApplicationShutdown(): Promise<void> {
    if (!this.outcomes) return;
    clearInterval(this.pollTimer);
    for (const worker of this.workers.values()) worker.stop();
    await this.listener?.stop();
    const finished = await Promise.all(
      [...this.workers.values()].map((worker) => worker.waitForRunning(this.config.shutdownGraceMs)),
    );
    if (finished.includes(false)) {
      const left = [...this.workers.values()].reduce((sum, worker) => sum + worker.runningCount, 0);
      this.logger.warn(`Shutdown grace period over; ${left} workflow(s) still running stay PENDING`);
    }
    this.outcomes.close();
    await this.outcomes.drained();
    this.outcomes = undefined;
  }

  private wake(queueName: string | undefined): void {
    if (queueName === undefined) {
      for (const worker of this.workers.values()) worker.wake();
    } else {
      this.workers.get(queueName)?.wake();
    }
  }
}
