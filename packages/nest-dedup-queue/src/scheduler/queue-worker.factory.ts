import { Injectable } from '@nestjs/common';
import { DedupQueueConfig } from '../dedup-queue.config';
import { WorkflowClaimer } from '../database/workflows/claim/workflow-claimer';
import { WorkflowControlStore } from '../database/workflows/control/workflow-control.store';
import { WorkflowOutcomeStore } from '../database/workflows/finish/workflow-outcomes.store';
import { WorkflowRegistry } from '../discovery/workflow.registry';
import { WorkflowLifecycle } from '../observability/workflow-lifecycle.events';
import { QueueSettings } from '../queue-settings';
import { WorkflowCompletions } from '../workflow-completions';
import { BodyRunner } from './body-runner';
import { OutcomeWriter } from './outcome.writer';
import { QueueWorker, QueueWorkerDependencies } from './queue.worker';
import { storedQueueNames } from '../utils/queue-shards';

/** What the scheduler tells every worker it makes: when claims must wait, and what to do after a lost claim. */
export type QueueWorkerHooks = Pick<QueueWorkerDependencies, 'claimsAllowed' | 'claimMayHaveBeenLost'>;

/** Makes the per-queue workers of the scheduler, wired to the module's (replaceable) collaborators. */
@Injectable()
export class QueueWorkerFactory {
  constructor(
    private readonly config: DedupQueueConfig,
    private readonly control: WorkflowControlStore,
    private readonly outcomeStore: WorkflowOutcomeStore,
    private readonly claimer: WorkflowClaimer,
    private readonly settings: QueueSettings,
    private readonly registry: WorkflowRegistry,
    private readonly runner: BodyRunner,
    private readonly outcomes: OutcomeWriter,
    private readonly completions: WorkflowCompletions,
    private readonly lifecycle: WorkflowLifecycle,
  ) {}

  create(queueName: string, hooks: QueueWorkerHooks): QueueWorker {
    return new QueueWorker(queueName, {
      control: this.control,
      outcomeStore: this.outcomeStore,
      claimer: this.claimer,
      settings: this.settings,
      registry: this.registry,
      runner: this.runner,
      outcomes: this.outcomes,
      completions: this.completions,
      executorId: this.config.executorId,
      storedQueueNames: storedQueueNames(this.config, queueName),
      lifecycle: this.lifecycle,
      ...hooks,
    });
  }
}
