import { Injectable } from '@nestjs/common';
import type { SupersededWorkflow } from '../database/workflows/enqueue/insert-results';
import { WorkflowLifecycle } from '../observability/workflow-lifecycle.events';
import { QueueScheduler } from '../scheduler/queue.scheduler';
import { WorkflowCompletions } from '../workflow-completions';

/**
 * What this process does at once for a workflow that a supersede it committed has cancelled, as `cancel` does: the
 * worker running it here aborts its signal and frees its slot, handles waiting for its result learn it finished, and
 * the `cancelled` event is emitted. Other processes learn it from the cancel notification sent on commit.
 */
@Injectable()
export class SupersededRuns {
  constructor(
    private readonly scheduler: QueueScheduler,
    private readonly completions: WorkflowCompletions,
    private readonly lifecycle: WorkflowLifecycle,
  ) {}

  ended(workflow: SupersededWorkflow & { queueName: string }): void {
    const { workflowId, workflowName, queueName, attempt } = workflow;
    this.scheduler.cancelled({ workflowId, reason: 'cancelled', attempt });
    this.completions.finished(workflowId);
    this.lifecycle.emit({ event: 'cancelled', workflowId, queueName, workflowName, reason: 'cancelled' });
  }
}
