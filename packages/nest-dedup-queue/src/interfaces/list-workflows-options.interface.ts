import type { WorkflowStatus } from './workflow-status.interface';

/** Filters of `QueueService.list()`. All are optional and combine with AND. */
export interface ListWorkflowsOptions {
  queueName?: string;
  status?: WorkflowStatus | WorkflowStatus[];
  workflowName?: string;
  deduplicationId?: string;
  /** At most this many rows, newest first. Default 100, at most 10000. */
  limit?: number;
  /** Skip this many rows. Default 0. */
  offset?: number;
}
