import type { Migration } from './migration.interface';

export const durability: Migration = {
  version: 2,
  name: 'durability',
  up: (schema) => `
    CREATE TABLE ${schema}.executors (
      executor_id  text PRIMARY KEY,
      hostname     text NOT NULL,
      pid          integer NOT NULL,
      started_at   timestamptz NOT NULL DEFAULT now(),
      heartbeat_at timestamptz NOT NULL DEFAULT now()
    );

    CREATE TABLE ${schema}.steps (
      workflow_id  text NOT NULL REFERENCES ${schema}.workflows (workflow_id) ON DELETE CASCADE,
      step_index   integer NOT NULL,
      step_name    text NOT NULL,
      output       json,
      error        json,
      completed_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (workflow_id, step_index)
    );

    ALTER TABLE ${schema}.workflows
      ADD COLUMN not_before            timestamptz,
      ADD COLUMN timeout_ms            integer,
      ADD COLUMN deadline_at           timestamptz,
      ADD COLUMN max_attempts          integer NOT NULL DEFAULT 1,
      ADD COLUMN failed_attempts       integer NOT NULL DEFAULT 0,
      ADD COLUMN recovery_attempts     integer NOT NULL DEFAULT 0,
      ADD COLUMN max_recovery_attempts integer NOT NULL DEFAULT 10;

    CREATE INDEX workflows_deadline ON ${schema}.workflows (deadline_at)
      WHERE deadline_at IS NOT NULL AND status IN ('ENQUEUED', 'PENDING');
  `,
};
