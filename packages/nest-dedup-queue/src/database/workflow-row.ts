import type { WorkflowErrorInfo, WorkflowStatus, WorkflowStatusInfo } from '../interfaces/workflow-status.interface';
import { withoutStack } from '../utils/error-info';
import { DELAYED_SQL } from './workflow-status.sql';

/** The columns of `workflows` that describe a workflow's state, as the queries select them. */
export interface WorkflowRow {
  workflow_id: string;
  queue_name: string;
  workflow_name: string;
  workflow_version: number;
  status: WorkflowStatus;
  deduplication_id: string | null;
  executor_id: string | null;
  attempts: number;
  created_at: Date;
  started_at: Date | null;
  completed_at: Date | null;
  error: WorkflowErrorInfo | null;
  partition_key: string | null;
  priority: number;
  not_before: Date | null;
  parent_workflow_id: string | null;
  superseded_by: string | null;
  supersedes: string | null;
  forked_from: string | null;
}

/**
 * The status a workflow is reported with. NOTE: DELAYED is not stored: an ENQUEUED row whose start time is still
 * ahead by the database's clock is DELAYED, so it turns ENQUEUED (ready) by itself, with no sweep to lag behind.
 */
export const REPORTED_STATUS_SQL = `(CASE WHEN ${DELAYED_SQL} THEN 'DELAYED' ELSE status END)`;

/** The columns `WorkflowRow` is read from. */
export const WORKFLOW_ROW_COLUMNS = `workflow_id, queue_name, workflow_name, workflow_version,
  ${REPORTED_STATUS_SQL} AS status, deduplication_id, executor_id,
  attempts, created_at, started_at, completed_at, error, partition_key, priority, not_before, parent_workflow_id,
  superseded_by, supersedes, forked_from`;

/** A row as a status, without the result (which only `getStatus()` reads, apart). */
export function toStatusInfo(row: WorkflowRow): Omit<WorkflowStatusInfo, 'result'> {
  return {
    workflowId: row.workflow_id,
    status: row.status,
    queueName: row.queue_name,
    workflowName: row.workflow_name,
    version: row.workflow_version,
    deduplicationId: row.deduplication_id,
    executorId: row.executor_id,
    attempts: row.attempts,
    createdAt: row.created_at,
    startedAt: row.started_at,
    completedAt: row.completed_at,
    error: row.error && withoutStack(row.error),
    partitionKey: row.partition_key,
    priority: row.priority,
    notBefore: row.not_before,
    parentWorkflowId: row.parent_workflow_id,
    ...(row.superseded_by !== null ? { supersededBy: row.superseded_by } : {}),
    ...(row.supersedes !== null ? { supersedes: row.supersedes } : {}),
    ...(row.forked_from !== null ? { forkedFrom: row.forked_from } : {}),
  };
}
