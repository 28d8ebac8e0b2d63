import type { Migration } from './migration.interface';

/**
 * Waiting workflows and messages (1.1.0).
 *
 * A workflow suspended in `sleep()` or `recv()` waits in `workflow_queue` with the status `WAITING`: it keeps its row
 * (so its deduplication key), holds no executor and no slot, and its `not_before` is when it wakes (`'infinity'` for a
 * `recv` without a timeout). `waiting_topic` is the topic a `recv` waits on (NULL in a `sleep`), and `messages_sent`
 * counts the messages sent to the workflow, so that a `recv` never suspends past a message sent while it looked (its
 * suspension is conditional on the count it read). `workflow_queue_waiting` finds the waiting rows that are due; the
 * ready index leaves them out, so waiting workflows cost a claim nothing. The deadline index covers `WAITING` rows (a
 * start-to-close timeout counts the time asleep), and the view `workflows` shows them.
 *
 * `workflow_messages` holds the messages of `send()`, keyed by queue and workflow, partitioned like the steps by the
 * day their workflow was created (retention drops a day's messages with its history and steps). The partitions of
 * the days the steps have are made here (`workflow_messages_before` for the days before 1.0's daily partitions).
 *
 * Backward compatible with 1.0: a 1.0 process ignores the new columns and never sees a `WAITING` row unless a 1.1
 * process suspended one (it then leaves it waiting; its own claims never take it).
 */
export const waitingAndMessages: Migration = {
  version: 16,
  name: 'waiting-and-messages',
  up: (schema) => `
    ALTER TABLE ${schema}.workflow_queue ADD COLUMN waiting_topic text,
      ADD COLUMN messages_sent integer NOT NULL DEFAULT 0;
    CREATE INDEX workflow_queue_waiting ON ${schema}.workflow_queue (queue_name, not_before) WHERE status = 'WAITING';
    DROP INDEX ${schema}.workflow_queue_deadline;
    CREATE INDEX workflow_queue_deadline ON ${schema}.workflow_queue (queue_name, deadline_at)
      WHERE deadline_at IS NOT NULL AND status IN ('ENQUEUED', 'PENDING', 'WAITING');

    DO $do$
    DECLARE
      definition text := pg_get_viewdef('${schema}.workflows'::regclass);
      widened text := replace(definition, '''PENDING''::text,', '''PENDING''::text, ''WAITING''::text,');
    BEGIN
      IF widened = definition THEN
        RAISE EXCEPTION 'the view workflows does not list the active statuses as expected: %', definition;
      END IF;
      EXECUTE 'CREATE OR REPLACE VIEW ${schema}.workflows AS ' || widened;
    END
    $do$;

    CREATE SEQUENCE ${schema}.workflow_messages_seq;
    CREATE TABLE ${schema}.workflow_messages (
      queue_name          text NOT NULL,
      workflow_id         text NOT NULL,
      workflow_created_at timestamptz NOT NULL,
      seq                 bigint NOT NULL DEFAULT nextval('${schema}.workflow_messages_seq'),
      topic               text NOT NULL,
      message             json NOT NULL,
      idempotency_key     text,
      sent_at             timestamptz NOT NULL DEFAULT now(),
      received_at         timestamptz,
      PRIMARY KEY (queue_name, workflow_id, seq, workflow_created_at)
    ) PARTITION BY RANGE (workflow_created_at);
    CREATE UNIQUE INDEX workflow_messages_idempotency_key
      ON ${schema}.workflow_messages (queue_name, workflow_id, idempotency_key, workflow_created_at)
      WHERE idempotency_key IS NOT NULL;
    CREATE INDEX workflow_messages_unreceived ON ${schema}.workflow_messages (queue_name, workflow_id, topic, seq)
      WHERE received_at IS NULL;

    DO $do$
    DECLARE
      part record;
    BEGIN
      FOR part IN
        SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
        FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = '${schema}.steps'::regclass AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'
      LOOP
        EXECUTE format('CREATE TABLE ${schema}.%I PARTITION OF ${schema}.workflow_messages %s',
          regexp_replace(part.name, '^steps_', 'workflow_messages_'), part.bound);
      END LOOP;
    END
    $do$;
  `,
};
