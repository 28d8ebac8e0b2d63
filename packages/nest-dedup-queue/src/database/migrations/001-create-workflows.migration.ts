import type { Migration } from './migration.interface';

export const createWorkflows: Migration = {
  version: 1,
  name: 'create-workflows',
  up: (schema) => `
    CREATE TABLE ${schema}.workflows (
      workflow_id      text PRIMARY KEY,
      seq              bigint GENERATED ALWAYS AS IDENTITY,
      queue_name       text NOT NULL,
      workflow_name    text NOT NULL,
      status           text NOT NULL CHECK (status IN
                         ('ENQUEUED', 'PENDING', 'SUCCESS', 'ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')),
      deduplication_id text,
      active_deduplication_id text,
      priority         integer NOT NULL DEFAULT 0,
      inputs           json NOT NULL,
      output           json,
      error            json,
      executor_id      text,
      attempts         integer NOT NULL DEFAULT 0,
      created_at       timestamptz NOT NULL DEFAULT now(),
      started_at       timestamptz,
      completed_at     timestamptz,
      updated_at       timestamptz NOT NULL DEFAULT now(),
      CHECK (active_deduplication_id IS NULL OR status IN ('ENQUEUED', 'PENDING'))
    );

    CREATE UNIQUE INDEX workflows_active_deduplication_id
      ON ${schema}.workflows (queue_name, active_deduplication_id)
      WHERE active_deduplication_id IS NOT NULL;

    CREATE INDEX workflows_ready ON ${schema}.workflows (queue_name, priority, seq) WHERE status = 'ENQUEUED';
    CREATE INDEX workflows_running ON ${schema}.workflows (queue_name, executor_id) WHERE status = 'PENDING';
    CREATE INDEX workflows_created_at ON ${schema}.workflows (created_at);
  `,
};
