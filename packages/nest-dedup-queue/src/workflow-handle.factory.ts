import { Injectable } from '@nestjs/common';
import { WorkflowStore } from './database/workflow.store';
import type { EnqueuedWorkflowHandle, WorkflowHandle } from './interfaces/workflow-handle.interface';
import { QueueWorkflowHandle } from './queue-workflow.handle';
import { WorkflowCompletions } from './workflow-completions';

/** Makes the `WorkflowHandle`s that the enqueue, look-up and control services return. */
@Injectable()
export class WorkflowHandleFactory {
  constructor(
    private readonly store: WorkflowStore,
    private readonly completions: WorkflowCompletions,
  ) {}

  handle<R>(workflowId: string): WorkflowHandle<R>;
  handle<R>(workflowId: string, created: boolean): EnqueuedWorkflowHandle<R>;
  handle<R>(workflowId: string, created?: boolean): WorkflowHandle<R> {
    return new QueueWorkflowHandle<R>(workflowId, this.store, this.completions, created ?? false);
  }
}
