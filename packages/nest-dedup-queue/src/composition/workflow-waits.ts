import { Injectable } from '@nestjs/common';
import { DedupQueueConfig } from '../dedup-queue.config';
import { MessageStore } from '../database/messages/message.store';
import { StepStore } from '../database/steps/step.store';
import { WaitingStore } from '../database/waiting/waiting.store';
import { QueueDatabase } from '../database/connection/queue-database';
import { workflowEventStore } from '../database/events/workflow-event.store';
import type { WorkflowExecution } from '../execution/workflow-execution';
import { RunWaits, attachRunWaits } from './run-waits';
import { WaitingWaker } from './waiting.waker';

/** What `WorkflowWaits.run` resolves with when the body was suspended in a `sleep`, `recv` or `getEvent`. */
export const SUSPENDED: unique symbol = Symbol('nest-dedup-queue: suspended');

/**
 * Gives each run of a workflow its durable waits (`sleep`, `recv`, `getEvent`), and tells its worker when it was
 * suspended.
 */
@Injectable()
export class WorkflowWaits {
  constructor(
    private readonly config: DedupQueueConfig,
    private readonly waiting: WaitingStore,
    private readonly messages: MessageStore,
    private readonly steps: StepStore,
    private readonly waker: WaitingWaker,
    private readonly database: QueueDatabase,
  ) {}

  /**
   * Runs `body` (the run of `execution`) with `sleep`, `recv` and `getEvent` available to it. Resolves with its result, or with
   * `SUSPENDED` once it is suspended: the workflow is then WAITING in Postgres and this run is over (its body's
   * promise never settles).
   */
  run<T>(execution: WorkflowExecution, body: () => Promise<T>): Promise<T | typeof SUSPENDED> {
    const waits = new RunWaits(execution, {
      waiting: this.waiting,
      messages: this.messages,
      events: workflowEventStore(this.database),
      steps: this.steps,
      executorId: this.config.executorId,
      expectWakeUp: (queueName, inMs) => this.waker.expect(queueName, inMs),
    });
    attachRunWaits(execution, waits);
    return Promise.race([body(), waits.suspended.then((): typeof SUSPENDED => SUSPENDED)]);
  }
}
