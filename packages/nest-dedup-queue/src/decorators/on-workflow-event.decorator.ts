import { WORKFLOW_EVENT_METADATA } from '../dedup-queue.constants';
import type { WorkflowEventName } from '../interfaces/workflow-event.interface';

/**
 * Calls the decorated provider method for each `event` that happens in this process (see docs/operations.md,
 * "Workflow events", for where each event happens), with a `WorkflowEvent` (`{ event, workflowId, queueName, workflowName, ... }`).
 * Each occurrence is delivered once. The method runs synchronously where the event happens; return a promise to
 * work asynchronously (it is not awaited). A method that throws or rejects is logged and never affects the queue.
 * Stack several decorators to listen to several events.
 *
 * @param event `'completed' | 'failed' | 'cancelled' | 'recovered' | 'dead-lettered' | 'deduplicated'`
 * @example
 * ```ts
 * @Injectable()
 * export class QueueAlerts {
 *   @OnWorkflowEvent('dead-lettered')
 *   onDeadLetter(event: WorkflowEvent) { this.pager.page(`${event.workflowName} ${event.workflowId}`); }
 * }
 * ```
 */
export function OnWorkflowEvent(event: WorkflowEventName): MethodDecorator {
  return (_target, _propertyKey, descriptor) => {
    const method = descriptor.value as object;
    const events = (Reflect.getMetadata(WORKFLOW_EVENT_METADATA, method) as WorkflowEventName[] | undefined) ?? [];
    Reflect.defineMetadata(WORKFLOW_EVENT_METADATA, [...events, event], method);
    return descriptor;
  };
}
