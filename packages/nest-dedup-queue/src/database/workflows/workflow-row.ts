import type { WorkflowErrorInfo, WorkflowStatus, WorkflowStatusInfo } from '../../interfaces/workflow-status.interface';
import { withoutStack } from '../../utils/error-info';
import { RowValues } from '../connection/row-values';
import { DELAYED_SQL } from '../tables/workflow-status.sql';
import { logicalQueueName } from '../../utils/queue-shards';

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

/**
 * A row as a status, without the result (which only `getStatus()` reads, apart). Never throws: a value that is not
 * of its documented type is replaced and reported in `unexpectedValues` (see `RowValues`). An infinite `not_before`
 * is no start time (a `queue-next` follow-up waiting for its key; a wait without a timeout, as 1.0 stored it):
 * `notBefore` null.
 */
export function toStatusInfo(row: WorkflowRow): Omit<WorkflowStatusInfo, 'result'> {
  const values = new RowValues();
  const status = values.status('status', row.status);
  const error = values.error('error', row.error);
  return {
    workflowId: values.requiredText('workflowId', row.workflow_id),
    status,
    queueName: logicalQueueName(values.requiredText('queueName', row.queue_name)),
    workflowName: values.requiredText('workflowName', row.workflow_name),
    version: values.number('version', row.workflow_version),
    deduplicationId: values.text('deduplicationId', row.deduplication_id),
    executorId: values.text('executorId', row.executor_id),
    attempts: values.number('attempts', row.attempts),
    createdAt: values.requiredDate('createdAt', row.created_at),
    startedAt: values.date('startedAt', row.started_at),
    completedAt: values.date('completedAt', row.completed_at),
    error: error && withoutStack(error),
    partitionKey: values.text('partitionKey', row.partition_key),
    priority: values.number('priority', row.priority),
    notBefore: values.date('notBefore', row.not_before, true),
    parentWorkflowId: values.text('parentWorkflowId', row.parent_workflow_id),
    ...(typeof row.superseded_by === 'string' ? { supersededBy: row.superseded_by } : {}),
    ...(typeof row.supersedes === 'string' ? { supersedes: row.supersedes } : {}),
    ...(typeof row.forked_from === 'string' ? { forkedFrom: row.forked_from } : {}),
    ...values.report(),
  };
}
