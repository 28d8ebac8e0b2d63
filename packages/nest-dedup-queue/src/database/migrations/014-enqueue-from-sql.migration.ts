import { WAKE_UP_CHANNEL_PREFIX } from '../connection/notification-channels';
import type { Migration } from './migration.interface';

/** The schema's name as an SQL string literal, from its quoted identifier (`"dedup_queue"` → `'dedup_queue'`). */
function schemaLiteral(schemaSql: string): string {
  const name = schemaSql.replace(/^"|"$/g, '').replace(/""/g, '"');
  return `'${name.replace(/'/g, "''")}'`;
}

/**
 * `<schema>.enqueue_workflow(...)`: enqueue from SQL, in the caller's transaction or a trigger, with the rules of
 * `enqueue`. One row `(workflow_id, created)`. A held deduplication ID gives the holder's ID and `created = false`
 * and never an error, so the caller's transaction goes on; `on_duplicate => 'replace'` first replaces a holder's
 * arguments if it has not started. A workflow ID given twice (`new_workflow_id`; the default is a new UUID) is the
 * same workflow (`created = false`); one that names a workflow of another queue is refused. Workers are woken when the caller commits (NOTIFY is transactional).
 * What SQL cannot know stays with the process that runs the workflow: its retries and dead-letter limit come from
 * its `@Workflow()` options, as for `externalWorkflows`.
 *
 * Errors (SQLSTATE 22023 invalid_parameter_value, before anything is written): an undeclared queue (one no process
 * of the module has declared, i.e. not in `<schema>.queues`), an empty workflow name, `args` that is not a JSON array,
 * a negative `delay_ms`, an unknown `on_duplicate`.
 *
 * NOTE: each statement of the function takes a snapshot of its own (the caller's READ COMMITTED transaction), so the
 * look-up of a holder after a conflict sees the holder that committed meanwhile; a holder that ended in between makes
 * the insert try again.
 */
export const enqueueFromSql: Migration = {
  version: 14,
  name: 'enqueue-from-sql',
  up: (schema) => `
    CREATE FUNCTION ${schema}.enqueue_workflow(
      queue_name       text,
      workflow_name    text,
      args             json DEFAULT '[]',
      deduplication_id text DEFAULT NULL,
      new_workflow_id  text DEFAULT NULL,
      delay_ms         double precision DEFAULT NULL,
      priority         integer DEFAULT 0,
      partition_key    text DEFAULT NULL,
      on_duplicate     text DEFAULT 'reject'
    ) RETURNS TABLE (workflow_id text, created boolean)
    LANGUAGE plpgsql VOLATILE AS $fn$
    #variable_conflict use_column
    DECLARE
      new_id text := coalesce(enqueue_workflow.new_workflow_id, gen_random_uuid()::text);
      holder text;
      inserted text;
      other_queue text;
    BEGIN
      IF NOT EXISTS (SELECT 1 FROM ${schema}.queues AS q WHERE q.queue_name = enqueue_workflow.queue_name) THEN
        RAISE EXCEPTION 'nest-dedup-queue: unknown queue "%"', enqueue_workflow.queue_name
          USING ERRCODE = 'invalid_parameter_value',
                HINT = 'Declare it in DedupQueueModule.forRoot({ queues }) or registerQueue() and boot a process once.';
      END IF;
      IF coalesce(enqueue_workflow.workflow_name, '') = '' THEN
        RAISE EXCEPTION 'nest-dedup-queue: workflow_name must be a registered workflow name (Class.method)'
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      IF enqueue_workflow.args IS NULL OR json_typeof(enqueue_workflow.args) <> 'array' THEN
        RAISE EXCEPTION 'nest-dedup-queue: args must be a JSON array of the arguments, got %',
          coalesce(json_typeof(enqueue_workflow.args), 'NULL')
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      IF enqueue_workflow.delay_ms < 0 THEN
        RAISE EXCEPTION 'nest-dedup-queue: delay_ms must be 0 or more, got %', enqueue_workflow.delay_ms
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      IF enqueue_workflow.on_duplicate NOT IN ('reject', 'replace') THEN
        RAISE EXCEPTION 'nest-dedup-queue: on_duplicate must be ''reject'' or ''replace'' in SQL, got %',
          enqueue_workflow.on_duplicate
          USING ERRCODE = 'invalid_parameter_value';
      END IF;

      FOR round IN 1..20 LOOP
        holder := NULL;
        IF enqueue_workflow.new_workflow_id IS NOT NULL THEN
          SELECT w.queue_name INTO other_queue FROM ${schema}.workflows AS w
          WHERE w.workflow_id = new_id ORDER BY w.queue_name = enqueue_workflow.queue_name DESC LIMIT 1;
          IF other_queue = enqueue_workflow.queue_name THEN
            RETURN QUERY SELECT new_id, false;
            RETURN;
          ELSIF other_queue IS NOT NULL THEN
            RAISE EXCEPTION 'nest-dedup-queue: workflow ID "%" names a workflow of queue "%"', new_id, other_queue
              USING ERRCODE = 'invalid_parameter_value';
          END IF;
        END IF;
        IF enqueue_workflow.deduplication_id IS NOT NULL THEN
          DELETE FROM ${schema}.workflow_queue AS w
          WHERE w.queue_name = enqueue_workflow.queue_name
            AND w.active_deduplication_id = enqueue_workflow.deduplication_id AND w.dedup_expires_at <= now();
        END IF;
        INSERT INTO ${schema}.workflow_queue AS w (workflow_id, queue_name, workflow_name, status, deduplication_id,
            active_deduplication_id, inputs, priority, partition_key, not_before)
        VALUES (new_id, enqueue_workflow.queue_name, enqueue_workflow.workflow_name, 'ENQUEUED',
            enqueue_workflow.deduplication_id, enqueue_workflow.deduplication_id, enqueue_workflow.args,
            coalesce(enqueue_workflow.priority, 0), enqueue_workflow.partition_key,
            now() + enqueue_workflow.delay_ms * interval '1 millisecond')
        ON CONFLICT DO NOTHING
        RETURNING w.workflow_id INTO inserted;
        IF inserted IS NOT NULL AND enqueue_workflow.new_workflow_id IS NOT NULL
           AND EXISTS (SELECT 1 FROM ${schema}.workflow_history AS h WHERE h.workflow_id = new_id) THEN
          -- It finished while this insert waited on its row: it is that workflow.
          DELETE FROM ${schema}.workflow_queue AS w
          WHERE w.queue_name = enqueue_workflow.queue_name AND w.workflow_id = new_id;
          RETURN QUERY SELECT new_id, false;
          RETURN;
        END IF;
        IF inserted IS NOT NULL THEN
          PERFORM pg_notify('${WAKE_UP_CHANNEL_PREFIX}' || ${schemaLiteral(schema)}, enqueue_workflow.queue_name);
          RETURN QUERY SELECT new_id, true;
          RETURN;
        END IF;
        IF enqueue_workflow.deduplication_id IS NULL THEN
          CONTINUE;
        END IF;
        IF enqueue_workflow.on_duplicate = 'replace' THEN
          UPDATE ${schema}.workflow_queue AS w SET inputs = enqueue_workflow.args, updated_at = now()
          WHERE w.queue_name = enqueue_workflow.queue_name
            AND w.active_deduplication_id = enqueue_workflow.deduplication_id
            AND w.status = 'ENQUEUED' AND w.attempts = 0
          RETURNING w.workflow_id INTO holder;
        END IF;
        IF holder IS NULL THEN
          SELECT w.workflow_id INTO holder FROM ${schema}.workflow_queue AS w
          WHERE w.queue_name = enqueue_workflow.queue_name
            AND w.active_deduplication_id = enqueue_workflow.deduplication_id
            AND (w.dedup_expires_at IS NULL OR w.dedup_expires_at > now());
        END IF;
        IF holder IS NOT NULL THEN
          RETURN QUERY SELECT holder, false;
          RETURN;
        END IF;
      END LOOP;
      RAISE EXCEPTION 'nest-dedup-queue: the enqueue of "%" into "%" did not settle after 20 rounds of conflicts',
        new_id, enqueue_workflow.queue_name
        USING ERRCODE = 'serialization_failure';
    END
    $fn$;
  `,
};
