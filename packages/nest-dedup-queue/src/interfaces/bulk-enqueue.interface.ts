import type { EnqueueOptions } from './enqueue-options.interface';

/** One item of `QueueService.enqueueMany()`. */
export interface BulkEnqueueItem {
  args: unknown[];
  options?: Omit<EnqueueOptions, 'manager' | 'db' | 'onDuplicate' | 'whenRunning' | 'requireSameArgs' | 'maxDelayMs'>;
}

/** Options of a whole `QueueService.enqueueMany()` call. */
export type BulkEnqueueOptions = Pick<EnqueueOptions, 'manager' | 'db'>;

/**
 * What `enqueueMany` did with one item: `created` (`workflowId` is the new workflow), `duplicate` (its
 * deduplication ID is held; `workflowId` is the holder), or `existing` (its `workflowId` names a workflow enqueued
 * before, which is kept).
 */
export interface BulkEnqueueResult {
  status: 'created' | 'duplicate' | 'existing';
  workflowId: string;
}
