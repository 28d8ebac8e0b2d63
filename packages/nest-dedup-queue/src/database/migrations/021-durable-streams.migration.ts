import type { Migration } from './migration.interface';

/**
 * Durable streams (1.1.0). `workflow_streams` holds the values a workflow appends with `writeStream`: one row per
 * value at its offset (0, 1, ...) in the stream `stream_key` of its workflow, keyed by queue first like every
 * per-workflow table and partitioned like the steps by the day the workflow was created (retention drops a day's
 * streams with its history). `total_bytes` is the size of the stream's values up to this one (the cap per stream
 * reads it from the last row); `closed` marks the row that `closeStream` appends (no value), after which nothing is
 * appended. A write from a workflow's body is recorded in `steps` (its offset) by the statement that appends it.
 *
 * `workflow_queue.has_streams` is set by a run's first write (and by a reader that waits on a workflow that has not
 * written yet): the statement that ends a workflow sends its streams' readers a hint when it is set (a stream closes
 * when its workflow finishes). The partitions of the days the steps
 * have are made here, as migration 016 did for the messages.
 *
 * Backward compatible with 1.0: a column with a constant default (no rewrite) and a new table.
 */
export const durableStreams: Migration = {
  version: 21,
  name: 'durable-streams',
  up: (schema) => `
    ALTER TABLE ${schema}.workflow_queue ADD COLUMN has_streams boolean NOT NULL DEFAULT false;

    CREATE TABLE ${schema}.workflow_streams (
      queue_name          text NOT NULL,
      workflow_id         text NOT NULL,
      workflow_created_at timestamptz NOT NULL,
      stream_key          text NOT NULL,
      stream_offset       integer NOT NULL,
      value               json,
      closed              boolean NOT NULL DEFAULT false,
      total_bytes         bigint NOT NULL,
      written_at          timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (queue_name, workflow_id, stream_key, stream_offset, workflow_created_at)
    ) PARTITION BY RANGE (workflow_created_at);

    DO $do$
    DECLARE
      part record;
    BEGIN
      FOR part IN
        SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
        FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = '${schema}.steps'::regclass AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'
      LOOP
        EXECUTE format('CREATE TABLE ${schema}.%I PARTITION OF ${schema}.workflow_streams %s',
          regexp_replace(part.name, '^steps_', 'workflow_streams_'), part.bound);
      END LOOP;
    END
    $do$;
  `,
};
