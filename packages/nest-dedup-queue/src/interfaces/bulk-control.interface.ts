import type { WorkflowStatus } from './workflow-status.interface';

/**
 * Which workflows `QueueService.cancelMany()` and `resumeMany()` act on: those that match every field given (at
 * least one; an empty filter is refused). Without `queueName`, every declared queue.
 */
export interface WorkflowFilter {
  queueName?: string;
  /** One status or several; `DELAYED` and `ENQUEUED` as `getStatus()` reports them. */
  status?: WorkflowStatus | WorkflowStatus[];
  workflowIds?: string[];
  deduplicationIds?: string[];
}

/**
 * What a bulk call did to one workflow the filter matched: `cancelled` (it was ENQUEUED, DELAYED, PENDING or WAITING and is
 * CANCELLED now; a running body's signal aborts), `not-cancellable` (a dead letter, or it finished meanwhile),
 * `resumed` (CANCELLED or dead-lettered, it is back in its queue), `key-held` (another workflow holds its
 * deduplication ID, so it stays as it was).
 */
export type BulkControlOutcome = 'cancelled' | 'not-cancellable' | 'resumed' | 'key-held';

/** One workflow a bulk call matched, and what it did to it. */
export interface BulkControlResult {
  workflowId: string;
  outcome: BulkControlOutcome;
}
