import type { EnqueueOptions } from './enqueue-options.interface';

/** One item of `QueueService.enqueueMany()`. */
export interface BulkEnqueueItem {
  args: unknown[];
  options?: Omit<EnqueueOptions, 'manager' | 'db' | 'onDuplicate' | 'whenRunning' | 'requireSameArgs' | 'maxDelayMs'>;
}

/** Options of a whole `QueueService.enqueueMany()` call. */
export interface BulkEnqueueOptions extends Pick<EnqueueOptions, 'manager' | 'db'> {
  /**
   * `'reject'` (the default): an item whose deduplication ID is held is reported as `duplicate`. `'supersede'`: each
   * item supersedes its key's holder as `enqueue` with `onDuplicate: 'supersede'` does (one transaction per item,
   * in order; two items with one deduplication ID are refused before anything is written).
   */
  onDuplicate?: 'reject' | 'supersede';
}

/**
 * What `enqueueMany` did with one item: `created` (`workflowId` is the new workflow), `duplicate` (its
 * deduplication ID is held; `workflowId` is the holder), or `existing` (its `workflowId` names a workflow enqueued
 * before, which is kept).
 */
export interface BulkEnqueueResult {
  status: 'created' | 'duplicate' | 'existing';
  workflowId: string;
  /** With `onDuplicate: 'supersede'`: the holder this item's workflow cancelled and took the key from. */
  supersededWorkflowId?: string;
}
