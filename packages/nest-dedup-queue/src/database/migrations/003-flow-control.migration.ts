import type { Migration } from './migration.interface';

export const flowControl: Migration = {
  version: 3,
  name: 'flow-control',
  up: (schema) => `
    CREATE TABLE ${schema}.queues (
      queue_name            text PRIMARY KEY,
      paused                boolean NOT NULL DEFAULT false,
      concurrency           integer,
      worker_concurrency    integer,
      partition_concurrency integer,
      rate_limit            integer,
      rate_period_ms        integer,
      updated_at            timestamptz NOT NULL DEFAULT now()
    );

    ALTER TABLE ${schema}.workflows ADD COLUMN partition_key text;

    CREATE INDEX workflows_ready_partition ON ${schema}.workflows (queue_name, partition_key, priority, seq)
      WHERE status = 'ENQUEUED' AND partition_key IS NOT NULL;
    CREATE INDEX workflows_running_partition ON ${schema}.workflows (queue_name, partition_key)
      WHERE status = 'PENDING' AND partition_key IS NOT NULL;
    CREATE INDEX workflows_started_at ON ${schema}.workflows (queue_name, started_at) WHERE started_at IS NOT NULL;
  `,
};
