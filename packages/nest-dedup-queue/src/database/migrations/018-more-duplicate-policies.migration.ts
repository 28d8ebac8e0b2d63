import type { Migration } from './migration.interface';

/** The view's columns as migrations 013 and 015 made them, and the new ones after them (a view only grows at its end). */
const VIEW_COLUMNS = `workflow_id, seq, queue_name, workflow_name, status, deduplication_id, active_deduplication_id,
  priority, inputs, output, error, executor_id, attempts, created_at, started_at, completed_at, updated_at, not_before,
  timeout_ms, deadline_at, max_attempts, failed_attempts, recovery_attempts, max_recovery_attempts, partition_key,
  dedup_window_ms, release_key_on_error, dedup_expires_at, next_deduplication_id, trace_context, parent_workflow_id,
  superseded_by, supersedes`;

/**
 * More duplicate policies (1.1.0). `superseded_by` / `supersedes`: a workflow ended by `onDuplicate: 'supersede'`
 * names the workflow that took its key, and that workflow names it back; on the active table, the history and the
 * `workflows` view (appended at its end; the active statuses as migration 016 left them). `start_deadline` (active
 * table only): the latest start a debounce may move a queued workflow to (`maxDelayMs`), set by the call that took
 * the key and lowered by later replaces.
 *
 * Backward compatible with 1.0: new nullable columns without defaults (no rewrite), and the view gains last columns.
 */
export const moreDuplicatePolicies: Migration = {
  version: 18,
  name: 'more-duplicate-policies',
  up: (schema) => `
    ALTER TABLE ${schema}.workflow_queue
      ADD COLUMN superseded_by text, ADD COLUMN supersedes text, ADD COLUMN start_deadline timestamptz;
    ALTER TABLE ${schema}.workflow_history ADD COLUMN superseded_by text, ADD COLUMN supersedes text;
    CREATE OR REPLACE VIEW ${schema}.workflows AS
      SELECT ${VIEW_COLUMNS} FROM ${schema}.workflow_queue
      WHERE status IN ('ENQUEUED', 'PENDING', 'WAITING', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')
      UNION ALL
      SELECT ${VIEW_COLUMNS.replace(
        'active_deduplication_id',
        'CASE WHEN dedup_expires_at > now() THEN active_deduplication_id END AS active_deduplication_id',
      )}
      FROM ${schema}.workflow_history;
  `,
};
