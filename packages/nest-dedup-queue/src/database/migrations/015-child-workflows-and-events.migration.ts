import type { Migration } from './migration.interface';

/** The view's columns as migration 013 made them, and the parent column after them (a view only grows at its end). */
const VIEW_COLUMNS = `workflow_id, seq, queue_name, workflow_name, status, deduplication_id, active_deduplication_id,
  priority, inputs, output, error, executor_id, attempts, created_at, started_at, completed_at, updated_at, not_before,
  timeout_ms, deadline_at, max_attempts, failed_attempts, recovery_attempts, max_recovery_attempts, partition_key,
  dedup_window_ms, release_key_on_error, dedup_expires_at, next_deduplication_id, trace_context, parent_workflow_id`;

/**
 * Workflows that compose (1.1.0). `parent_workflow_id`: the workflow whose body enqueued this one (a child), on the
 * active table, the history and the view; the active table's index on it finds a workflow's unfinished children
 * (`cancel(id, { cancelChildren: true })`), per queue. `workflow_events`: the last value of each key a workflow
 * published with `setEvent`, keyed by queue first like every per-workflow table; `workflow_created_at` (the
 * workflow's creation time, the day its history partition holds) lets retention delete a day's events when it drops
 * that day.
 *
 * Backward compatible with 1.0: new nullable columns (no rewrite), a new table, and the view gains a last column.
 */
export const childWorkflowsAndEvents: Migration = {
  version: 15,
  name: 'child-workflows-and-events',
  up: (schema) => `
    ALTER TABLE ${schema}.workflow_queue ADD COLUMN parent_workflow_id text;
    ALTER TABLE ${schema}.workflow_history ADD COLUMN parent_workflow_id text;
    CREATE INDEX workflow_queue_children ON ${schema}.workflow_queue (queue_name, parent_workflow_id)
      WHERE parent_workflow_id IS NOT NULL;

    CREATE OR REPLACE VIEW ${schema}.workflows AS
      SELECT ${VIEW_COLUMNS} FROM ${schema}.workflow_queue
      WHERE status IN ('ENQUEUED', 'PENDING', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')
      UNION ALL
      SELECT ${VIEW_COLUMNS.replace(
        'active_deduplication_id',
        'CASE WHEN dedup_expires_at > now() THEN active_deduplication_id END AS active_deduplication_id',
      )}
      FROM ${schema}.workflow_history;

    CREATE TABLE ${schema}.workflow_events (
      queue_name          text NOT NULL,
      workflow_id         text NOT NULL,
      key                 text NOT NULL,
      value               json,
      updated_at          timestamptz NOT NULL DEFAULT now(),
      workflow_created_at timestamptz NOT NULL,
      PRIMARY KEY (queue_name, workflow_id, key)
    );
    CREATE INDEX workflow_events_workflow_created_at ON ${schema}.workflow_events (workflow_created_at);
  `,
};
