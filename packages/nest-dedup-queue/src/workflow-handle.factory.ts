import { Injectable } from '@nestjs/common';
import { WorkflowReadStore } from './database/workflows/reads/workflow-reads.store';
import type { EnqueuedWorkflowHandle, WorkflowHandle } from './interfaces/workflow-handle.interface';
import { QueueWorkflowHandle } from './queue-workflow.handle';
import { WorkflowCompletions } from './workflow-completions';

/** Makes the `WorkflowHandle`s that the enqueue, look-up and control services return. */
@Injectable()
export class WorkflowHandleFactory {
  constructor(
    private readonly store: WorkflowReadStore,
    private readonly completions: WorkflowCompletions,
  ) {}

  handle<R>(workflowId: string): WorkflowHandle<R>;
  /** `queueName`, when known (an enqueue), makes its look-ups name the queue (on Citus: one node, not every node). */
  handle<R>(workflowId: string, created: boolean, queueName?: string): EnqueuedWorkflowHandle<R>;
  handle<R>(workflowId: string, created?: boolean, queueName?: string): WorkflowHandle<R> {
    return new QueueWorkflowHandle<R>(workflowId, this.store, this.completions, created ?? false, queueName);
  }
}
