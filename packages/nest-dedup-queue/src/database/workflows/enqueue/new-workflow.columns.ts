import type { NewWorkflow } from '../new-workflow';
import { STATUS_SQL } from '../../tables/workflow-status.sql';

/** One input of a new workflow row: its SQL type and where its value comes from. */
interface NewWorkflowInput {
  type: string;
  value(workflow: NewWorkflow): unknown;
}

/** The inputs of a new workflow row, named as the parameters (and `unnest` columns) of the enqueue statements. */
export const NEW_WORKFLOW_INPUTS = {
  workflow_id: { type: 'text', value: (w) => w.workflowId },
  workflow_id_given: { type: 'bool', value: (w) => w.workflowIdGiven },
  queue_name: { type: 'text', value: (w) => w.queueName },
  workflow_name: { type: 'text', value: (w) => w.workflowName },
  workflow_version: { type: 'int', value: (w) => w.version },
  deduplication_id: { type: 'text', value: (w) => w.deduplicationId },
  inputs: { type: 'text', value: (w) => w.inputsJson },
  timeout_ms: { type: 'int', value: (w) => w.timeoutMs },
  deadline_at: { type: 'timestamptz', value: (w) => w.deadlineAt },
  max_attempts: { type: 'int', value: (w) => w.maxAttempts },
  max_recovery_attempts: { type: 'int', value: (w) => w.maxRecoveryAttempts },
  partition_key: { type: 'text', value: (w) => w.partitionKey },
  priority: { type: 'int', value: (w) => w.priority },
  run_at: { type: 'timestamptz', value: (w) => w.runAt },
  delay_ms: { type: 'float8', value: (w) => w.delayMs },
  max_delay_ms: { type: 'float8', value: (w) => w.maxDelayMs },
  dedup_window_ms: { type: 'int', value: (w) => w.deduplicationWindowMs },
  release_key_on_error: { type: 'bool', value: (w) => w.releaseKeyOnError },
  trace_context: { type: 'text', value: (w) => w.traceContext },
  parent_workflow_id: { type: 'text', value: (w) => w.parentWorkflowId },
  forked_from: { type: 'text', value: (w) => w.forkedFrom },
} satisfies Record<string, NewWorkflowInput>;

export type NewWorkflowInputName = keyof typeof NEW_WORKFLOW_INPUTS;

export const NEW_WORKFLOW_INPUT_NAMES = Object.keys(NEW_WORKFLOW_INPUTS) as NewWorkflowInputName[];

/**
 * The columns of a new workflow row, each as SQL over the inputs (`input(name)` gives how the statement names one:
 * a `$n::type` parameter, or an `unnest` column). An ENQUEUED row that holds its deduplication ID and is due at
 * `runAt`, or `delayMs` from now by the database's clock (at once when neither is given). `overrides` replace
 * columns' SQL or add columns.
 */
export function newWorkflowColumns(
  input: (name: NewWorkflowInputName) => string,
  overrides: Record<string, string> = {},
): Record<string, string> {
  const columns: Record<string, () => string> = {
    workflow_id: () => input('workflow_id'),
    queue_name: () => input('queue_name'),
    workflow_name: () => input('workflow_name'),
    workflow_version: () => input('workflow_version'),
    status: () => STATUS_SQL.ENQUEUED,
    deduplication_id: () => input('deduplication_id'),
    active_deduplication_id: () => input('deduplication_id'),
    inputs: () => `${input('inputs')}::json`,
    timeout_ms: () => input('timeout_ms'),
    deadline_at: () => input('deadline_at'),
    max_attempts: () => input('max_attempts'),
    max_recovery_attempts: () => input('max_recovery_attempts'),
    partition_key: () => input('partition_key'),
    priority: () => input('priority'),
    not_before: () => `coalesce(${input('run_at')}, now() + ${input('delay_ms')} * interval '1 millisecond')`,
    start_deadline: () => `now() + ${input('max_delay_ms')} * interval '1 millisecond'`,
    dedup_window_ms: () => input('dedup_window_ms'),
    release_key_on_error: () => input('release_key_on_error'),
    trace_context: () => input('trace_context'),
    parent_workflow_id: () => input('parent_workflow_id'),
    forked_from: () => input('forked_from'),
  };
  // NOTE: an overridden column never asks for its inputs, so a statement has no parameter it does not use.
  const sql = Object.entries(columns).map(([column, value]) => [column, overrides[column] ?? value()] as const);
  return { ...Object.fromEntries(sql), ...overrides };
}
