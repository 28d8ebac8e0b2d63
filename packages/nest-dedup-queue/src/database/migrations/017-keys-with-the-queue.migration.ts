import type { Migration } from './migration.interface';

/**
 * Every unique key of a per-workflow table includes `queue_name`, as a table distributed by the queue needs (Citus
 * refuses a unique index without its distribution column), and on one server alike: one schema for both.
 *
 * The steps' key `(workflow_id, step_index, workflow_created_at)` becomes `(queue_name, workflow_id, step_index,
 * workflow_created_at)`, and `queue_name` is required: the checkpoints made before 1.0 (in `steps_legacy`) take
 * their workflow's queue from the history, any day of it (a workflow running when 1.0 migrated finished into a daily
 * partition), or from the active table (since 1.0 every checkpoint is written with it). The legacy partition's
 * own primary key from 0.x `(workflow_id, step_index)` goes; the new key covers it. The active table's keys already
 * start with the queue (013) and the history has no unique key.
 *
 * Backward compatible with the previous minor: checkpoints were already written with their queue, and
 * `ON CONFLICT DO NOTHING` names no key.
 */
export const keysWithTheQueue: Migration = {
  version: 17,
  name: 'keys-with-the-queue',
  up: (schema) => `
    ALTER TABLE ${schema}.steps_legacy DROP CONSTRAINT IF EXISTS steps_pkey;
    UPDATE ${schema}.steps_legacy AS s SET queue_name = h.queue_name
      FROM ${schema}.workflow_history AS h
      WHERE s.queue_name IS NULL AND h.workflow_id = s.workflow_id;
    UPDATE ${schema}.steps_legacy AS s SET queue_name = w.queue_name
      FROM ${schema}.workflow_queue AS w
      WHERE s.queue_name IS NULL AND w.workflow_id = s.workflow_id;
    DROP INDEX ${schema}.steps_key;
    ALTER TABLE ${schema}.steps ALTER COLUMN queue_name SET NOT NULL;
    CREATE UNIQUE INDEX steps_key ON ${schema}.steps (queue_name, workflow_id, step_index, workflow_created_at);
  `,
};
