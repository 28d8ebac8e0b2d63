import type { DeduplicationOutcome } from './deduplication-event.interface';
import type { WorkflowErrorInfo } from './workflow-status.interface';

/** The events an `@OnWorkflowEvent(event)` method can listen to. */
export type WorkflowEventName = 'completed' | 'failed' | 'cancelled' | 'recovered' | 'dead-lettered' | 'deduplicated';

/**
 * What an `@OnWorkflowEvent()` method receives. Every event has `event`, `workflowId`, `queueName` and
 * `workflowName`; the other fields belong to some events only.
 */
export interface WorkflowEvent {
  event: WorkflowEventName;
  /** The workflow the event is about; for `deduplicated`, the workflow that holds the key. */
  workflowId: string;
  queueName: string;
  /** The workflow's registered name; for `deduplicated`, the name of the workflow whose enqueue was a duplicate. */
  workflowName: string;
  /** `completed`, `failed`: how long the run took, in milliseconds. */
  durationMs?: number;
  /** `completed`, `failed`: which run this was (1 on the first, higher after retries and recoveries). */
  attempt?: number;
  /** `failed`: the error of the last attempt. */
  error?: WorkflowErrorInfo;
  /** `cancelled`: by `QueueService.cancel()` or by its timeout. */
  reason?: 'cancelled' | 'timed-out';
  /** `deduplicated`: the key that was held. */
  deduplicationId?: string;
  /** `deduplicated`: what the duplicate policy did. */
  outcome?: DeduplicationOutcome;
}
