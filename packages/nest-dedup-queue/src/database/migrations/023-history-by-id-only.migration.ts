import type { Migration } from './migration.interface';

/** How far back the upgrade copies starts into `queue_starts`: the rate windows in flight that it keeps exact. */
export const STARTS_BACKFILL_HORIZON = `interval '1 hour'`;

/**
 * History by ID only (1.2.0, issue 32 step 1). A finished workflow writes two index entries in the history: its
 * workflow ID (look-ups, children through `workflow_history_by_parent`, which only children enter) and a BRIN range
 * on `created_at`, which replaces the B-tree of the same name; the dashboard's lists read the history newest first in
 * windows of creation time through it (see `DashboardStore`), and `workflow_history_completed_at` (BRIN) stays.
 *
 * - Dropped: `workflow_history_created_at`, `_by_queue_status`, `_by_workflow_name`, `_by_deduplication_id`,
 *   `_by_partition_key`, `_started_at` (six B-tree entries per finished workflow, 2 of 3 of the history's WAL).
 * - `queue_starts`: one row per start of a workflow in a queue with a rate limit (per queue or per partition),
 *   written by the claim that starts it, which also deletes the queue's rows older than its window; the rate limit
 *   counts there (no longer the history's `started_at`). Keyed by `(queue_name, started_at)`, vacuumed as often as the
 *   active table (rows come and go with every claim); on Citus distributed by `queue_name` with the active table. The upgrade copies the starts of the last hour (`STARTS_BACKFILL_HORIZON`)
 *   from both tables, so that a window in flight counts them.
 *
 * One command per item, one index per DROP INDEX: on a 1.1 cluster's distributed schema Citus refuses to drop several
 * distributed objects in one command, and propagates a DROP INDEX with its whole query string. Backward compatible
 * with 1.1: a 1.1 process writes history rows as before, and its rate claim still reads the
 * history's `started_at` (exact, without an index: slower); its starts are not in `queue_starts`, so a 1.2 process
 * does not count them (see docs/upgrading.md).
 */
export const historyByIdOnly: Migration = {
  version: 23,
  name: 'history-by-id-only',
  up: (schema) => [
    `CREATE TABLE ${schema}.queue_starts (
       queue_name    text NOT NULL,
       started_at    timestamptz NOT NULL,
       partition_key text
     )`,
    `CREATE INDEX queue_starts_window ON ${schema}.queue_starts (queue_name, started_at)`,
    `ALTER TABLE ${schema}.queue_starts SET (
       autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0
     )`,
    `INSERT INTO ${schema}.queue_starts (queue_name, started_at, partition_key)
       SELECT queue_name, started_at, partition_key FROM ${schema}.workflow_history
       WHERE started_at > now() - ${STARTS_BACKFILL_HORIZON}
       UNION ALL
       SELECT queue_name, started_at, partition_key FROM ${schema}.workflow_queue
       WHERE started_at > now() - ${STARTS_BACKFILL_HORIZON}
         AND status IN ('ENQUEUED', 'PENDING', 'WAITING', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')`,
    ...[
      'workflow_history_created_at',
      'workflow_history_by_queue_status',
      'workflow_history_by_workflow_name',
      'workflow_history_by_deduplication_id',
      'workflow_history_by_partition_key',
      'workflow_history_started_at',
    ].map((index) => `DROP INDEX ${schema}.${index}`),
    `CREATE INDEX workflow_history_created_at ON ${schema}.workflow_history USING brin (created_at)
       WITH (pages_per_range = 16, autosummarize = on)`,
  ],
};
