import { STREAM_CHANNEL_PREFIX } from '../connection/notification-channels';

/**
 * The tables of a schema (since migration 013), named once. `active`: what can still run (ENQUEUED, DELAYED,
 * PENDING), dead letters waiting for `resume`, and the key records of finished workflows whose deduplication window
 * is open; keyed by `(workflow_id, queue_name)`. `history`: finished workflows, partitioned by day of creation.
 * `workflows`: a view of both, a row per workflow. `steps`: checkpoints, partitioned like the history. `events`: the
 * values workflows published with `setEvent` (since migration 015). `streams`: the values of `writeStream`, partitioned
 * like the steps (since migration 021). `handOverKeys`: the function that hands freed
 * keys to their `queue-next` follow-ups in the transaction that freed them; `eventWaits`: the workflows suspended in
 * a `getEvent`, by the event they wait for (both since migration 020).
 */
export interface WorkflowTables {
  active: string;
  history: string;
  workflows: string;
  steps: string;
  events: string;
  streams: string;
  /** The channel (unquoted) on which a stream's readers are told it changed; the payload is its workflow's ID. */
  streamChannel: string;
  handOverKeys: string;
  eventWaits: string;
  /** The starts of workflows in queues with a rate limit, which the limit counts (since migration 023). */
  starts: string;
  /** A row per ENQUEUED workflow, what a claim reads (since migration 025; see `ready-rows.sql.ts`). */
  ready: string;
}

export function workflowTables(schemaSql: string): WorkflowTables {
  return {
    active: `${schemaSql}.workflow_queue`,
    history: `${schemaSql}.workflow_history`,
    workflows: `${schemaSql}.workflows`,
    steps: `${schemaSql}.steps`,
    events: `${schemaSql}.workflow_events`,
    streams: `${schemaSql}.workflow_streams`,
    streamChannel: `${STREAM_CHANNEL_PREFIX}${schemaSql.slice(1, -1)}`,
    handOverKeys: `${schemaSql}.hand_over_keys`,
    eventWaits: `${schemaSql}.event_waits`,
    starts: `${schemaSql}.queue_starts`,
    ready: `${schemaSql}.workflow_ready`,
  };
}

/** The partial unique index that enforces "one active workflow per deduplication ID and queue". */
export const ACTIVE_DEDUPLICATION_INDEX = 'workflow_queue_deduplication_key';

/**
 * The index on `deduplication_id` that an operator may add to the history (docs/dashboard.md): with it, a look-up by
 * deduplication ID reads the history through it instead of in windows of creation time.
 */
export const HISTORY_DEDUPLICATION_INDEX = 'workflow_history_by_deduplication_id';

/** The columns that the active table and the history share: a workflow moves between them as it is. */
export const WORKFLOW_COLUMNS = [
  'workflow_id',
  'seq',
  'queue_name',
  'workflow_name',
  'status',
  'deduplication_id',
  'active_deduplication_id',
  'priority',
  'inputs',
  'output',
  'error',
  'executor_id',
  'attempts',
  'created_at',
  'started_at',
  'completed_at',
  'updated_at',
  'not_before',
  'timeout_ms',
  'deadline_at',
  'max_attempts',
  'failed_attempts',
  'recovery_attempts',
  'max_recovery_attempts',
  'partition_key',
  'dedup_window_ms',
  'release_key_on_error',
  'dedup_expires_at',
  'next_deduplication_id',
  'trace_context',
  'parent_workflow_id',
  'superseded_by',
  'supersedes',
  'workflow_version',
  'forked_from',
] as const;

export type WorkflowColumn = (typeof WORKFLOW_COLUMNS)[number];

/** `a.col, b.col, ...` for every shared column, with `overrides` in place of some (SQL expressions). */
export function workflowColumnsSql(row: string, overrides: Partial<Record<WorkflowColumn, string>> = {}): string {
  return WORKFLOW_COLUMNS.map((column) => overrides[column] ?? `${row}${column}`).join(', ');
}

/** The shared column names, for an INSERT's column list. */
export const WORKFLOW_COLUMN_LIST = WORKFLOW_COLUMNS.join(', ');
