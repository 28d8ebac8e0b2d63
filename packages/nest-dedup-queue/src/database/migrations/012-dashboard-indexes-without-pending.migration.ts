import { NOT_PENDING_SQL } from '../tables/workflow-status.sql';
import type { Migration } from './migration.interface';

/**
 * The dashboard's indexes (010's four, and 001's `workflows_created_at`) leave PENDING rows out, so that claiming a
 * workflow writes four index entries instead of nine: a PENDING row is in no list index, and the dashboard reads
 * PENDING rows through `workflows_running` (001), a small set bounded by the queues' concurrency. Same names, same
 * keys; only the predicate changes.
 *
 * Backward compatible with the previous minor: nothing else reads these indexes, and a dashboard of the previous
 * version against this schema still answers, only without these indexes for a read that does not exclude PENDING.
 */
export const dashboardIndexesWithoutPending: Migration = {
  version: 12,
  name: 'dashboard-indexes-without-pending',
  up: (schema) => `
    DROP INDEX ${schema}.workflows_created_at, ${schema}.workflows_by_queue_status, ${schema}.workflows_by_workflow_name,
      ${schema}.workflows_by_deduplication_id, ${schema}.workflows_by_partition_key;
    CREATE INDEX workflows_created_at ON ${schema}.workflows (created_at) WHERE ${NOT_PENDING_SQL};
    CREATE INDEX workflows_by_queue_status ON ${schema}.workflows (queue_name, status, created_at, seq)
      INCLUDE (not_before) WHERE ${NOT_PENDING_SQL};
    CREATE INDEX workflows_by_workflow_name ON ${schema}.workflows (workflow_name, status, created_at, seq)
      INCLUDE (not_before) WHERE ${NOT_PENDING_SQL};
    CREATE INDEX workflows_by_deduplication_id ON ${schema}.workflows (deduplication_id, created_at, seq)
      WHERE deduplication_id IS NOT NULL AND ${NOT_PENDING_SQL};
    CREATE INDEX workflows_by_partition_key ON ${schema}.workflows (partition_key, created_at, seq)
      WHERE partition_key IS NOT NULL AND ${NOT_PENDING_SQL};
  `,
};
