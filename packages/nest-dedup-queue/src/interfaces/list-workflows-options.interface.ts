import type { WorkflowStatus } from './workflow-status.interface';

/** Filters of `QueueService.list()`. All are optional and combine with AND. */
export interface ListWorkflowsOptions {
  queueName?: string;
  /**
   * The statuses as reported: `'DELAYED'` matches workflows waiting for their start time, `'ENQUEUED'` only those
   * ready to run (give both for every workflow not yet started).
   */
  status?: WorkflowStatus | WorkflowStatus[];
  workflowName?: string;
  deduplicationId?: string;
  /** The children of this workflow: those its body enqueued (see docs/composing-workflows.md). */
  parentWorkflowId?: string;
  /** At most this many rows, newest first by creation time. Default 100, at most 10000. */
  limit?: number;
  /** Skip this many rows. Default 0. */
  offset?: number;
}
