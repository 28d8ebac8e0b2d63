import type { Migration } from './migration.interface';

/**
 * What the dashboard's lists and step timeline need. Every list is ordered newest first by `(created_at, seq)` and
 * paged by that key, so each filter has an index that ends in `(created_at, seq)`: queue and status (also the capped
 * counts per status), workflow name and status, deduplication ID (the search), partition key. No filter and a time
 * range alone use `workflows_created_at` (001). `not_before` is included so that DELAYED (an ENQUEUED row whose start
 * time is ahead) is told from ENQUEUED in the index alone. `steps.started_at` gives each step's duration.
 */
export const dashboard: Migration = {
  version: 10,
  name: 'dashboard',
  up: (schema) => `
    ALTER TABLE ${schema}.steps ADD COLUMN started_at timestamptz;

    CREATE INDEX workflows_by_queue_status ON ${schema}.workflows (queue_name, status, created_at, seq)
      INCLUDE (not_before);
    CREATE INDEX workflows_by_workflow_name ON ${schema}.workflows (workflow_name, status, created_at, seq)
      INCLUDE (not_before);
    CREATE INDEX workflows_by_deduplication_id ON ${schema}.workflows (deduplication_id, created_at, seq)
      WHERE deduplication_id IS NOT NULL;
    CREATE INDEX workflows_by_partition_key ON ${schema}.workflows (partition_key, created_at, seq)
      WHERE partition_key IS NOT NULL;
  `,
};
