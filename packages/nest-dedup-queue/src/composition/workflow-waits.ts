import { Injectable } from '@nestjs/common';
import { DedupQueueConfig } from '../dedup-queue.config';
import { MessageStore } from '../database/messages/message.store';
import { StepStore } from '../database/steps/step.store';
import { WaitingStore } from '../database/waiting/waiting.store';
import { QueueDatabase } from '../database/connection/queue-database';
import { workflowEventStore } from '../database/events/workflow-event.store';
import type { WorkflowExecution } from '../execution/workflow-execution';
import { RunWaits, RunWaitsDependencies, attachRunWaits } from './run-waits';
import { WaitingWaker } from './waiting.waker';

/** What `WorkflowWaits.run` resolves with when the body was suspended in a `sleep`, `recv` or `getEvent`. */
export const SUSPENDED: unique symbol = Symbol('nest-dedup-queue: suspended');

/**
 * Gives each run of a workflow its durable waits (`sleep`, `recv`, `getEvent`), and tells its worker when it was
 * suspended.
 */
@Injectable()
export class WorkflowWaits {
  private readonly deps: RunWaitsDependencies;

  constructor(
    config: DedupQueueConfig,
    waiting: WaitingStore,
    messages: MessageStore,
    steps: StepStore,
    waker: WaitingWaker,
    database: QueueDatabase,
  ) {
    this.deps = {
      waiting,
      messages,
      events: workflowEventStore(database),
      steps,
      executorId: config.executorId,
      expectWakeUp: (queueName, inMs) => waker.expect(queueName, inMs),
    };
  }

  /**
   * Runs `body` (the run of `execution`) with `sleep`, `recv` and `getEvent` available to it. Resolves with its result, or with
   * `SUSPENDED` once it is suspended: the workflow is then WAITING in Postgres and this run is over (its body's
   * promise never settles).
   */
  run<T>(execution: WorkflowExecution, body: () => Promise<T>): Promise<T | typeof SUSPENDED> {
    return new Promise((resolve, reject) => {
      attachRunWaits(execution, new RunWaits(execution, this.deps, () => resolve(SUSPENDED)));
      body().then(resolve, reject);
    });
  }
}
