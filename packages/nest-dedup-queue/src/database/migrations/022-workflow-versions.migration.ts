import { WAKE_UP_CHANNEL_PREFIX } from '../connection/notification-channels';
import {
  DEFINER_FUNCTION,
  ENQUEUE_WORKFLOW_ARGUMENTS,
  grantExecuteSql,
} from './019-enqueue-from-sql-secured.migration';
import type { Migration } from './migration.interface';
import { schemaLiteral } from './schema-literal';

/** The statuses of the active table's branch of the view, as migration 018 left them. */
const VIEW_ACTIVE_STATUSES = `('ENQUEUED', 'PENDING', 'WAITING', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')`;

/** `enqueue_workflow`'s argument types from this migration on, which name it in GRANT and REVOKE. */
const ENQUEUE_WORKFLOW_VERSIONED_ARGUMENTS = `${ENQUEUE_WORKFLOW_ARGUMENTS}, integer`;

/**
 * Code that changes under running workflows (1.1.0).
 *
 * - `workflow_version` (active table and history, default 1): the version of its workflow a run was enqueued with;
 *   a worker claims only the names and versions it registers. Every run of an older release gets version 1, which
 *   is what `@Workflow()` without a version registers.
 * - `forked_from`: the workflow a fork copied its recorded positions from (`QueueService.fork`).
 * - `executors.queues` / `executors.workflows`: what each live executor drains and registers (`[{ name, version }]`,
 *   aliases included), so that any process, and SQL, can tell runs that no live executor would claim. NULL for an
 *   executor of an older release, which registers what it registers (unknown here).
 * - `registered_workflows`: every workflow name and version a process of this release has registered, with when
 *   it was first and last registered: `enqueue_workflow` refuses a name no process ever registered (a misspelt name
 *   would otherwise wait ENQUEUED forever), and takes a run's version from it when no live executor registers one.
 * - The view `workflows` gains `workflow_version` and `forked_from` at its end, after whatever columns it has.
 * - `enqueue_workflow` takes `workflow_version` (default: the highest a live executor registers for that name, else
 *   the highest ever registered, else 1) and refuses an unknown name; it keeps migration 019's checks, rights
 *   (`SECURITY DEFINER`, the pinned `search_path`) and header. NOTE: a new parameter is a new signature, so the
 *   function is dropped and made again; the roles allowed to execute it keep that right, and PUBLIC still has not.
 *
 * Backward compatible with 1.0: new columns with defaults or nullable (no rewrite), a new table, the view grows at
 * its end. A 1.0 process ignores versions: it claims the runs of the names it has whatever their version, and the
 * runs it enqueues and the rows it moves to the history get version 1 (see docs/upgrading.md).
 */
export const workflowVersions: Migration = {
  version: 22,
  name: 'workflow-versions',
  up: (schema) => `
    ALTER TABLE ${schema}.workflow_queue
      ADD COLUMN workflow_version integer NOT NULL DEFAULT 1, ADD COLUMN forked_from text;
    ALTER TABLE ${schema}.workflow_history
      ADD COLUMN workflow_version integer NOT NULL DEFAULT 1, ADD COLUMN forked_from text;
    ALTER TABLE ${schema}.executors ADD COLUMN queues text[], ADD COLUMN workflows jsonb;
    CREATE TABLE ${schema}.registered_workflows (
      workflow_name       text NOT NULL,
      version             integer NOT NULL,
      first_registered_at timestamptz NOT NULL DEFAULT now(),
      last_registered_at  timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (workflow_name, version)
    );

    DO $do$
    DECLARE
      columns text;
    BEGIN
      SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO columns FROM pg_attribute
      WHERE attrelid = '${schema}.workflows'::regclass AND attnum > 0 AND NOT attisdropped;
      EXECUTE format(
        'CREATE OR REPLACE VIEW ${schema}.workflows AS
           SELECT %s, workflow_version, forked_from FROM ${schema}.workflow_queue
           WHERE status IN ${VIEW_ACTIVE_STATUSES.replace(/'/g, "''")}
           UNION ALL
           SELECT %s, workflow_version, forked_from FROM ${schema}.workflow_history',
        columns,
        replace(columns, 'active_deduplication_id',
                'CASE WHEN dedup_expires_at > now() THEN active_deduplication_id END AS active_deduplication_id'));
    END
    $do$;

    CREATE TEMPORARY TABLE enqueue_workflow_grantees ON COMMIT DROP AS
      SELECT a.grantee FROM pg_proc AS p, aclexplode(p.proacl) AS a
      WHERE p.oid = '${schema}.enqueue_workflow(${ENQUEUE_WORKFLOW_ARGUMENTS})'::regprocedure
        AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner;
    DROP FUNCTION ${schema}.enqueue_workflow(${ENQUEUE_WORKFLOW_ARGUMENTS});
    ${enqueueWorkflowFunction(schema)}
    REVOKE ALL ON FUNCTION ${schema}.enqueue_workflow(${ENQUEUE_WORKFLOW_VERSIONED_ARGUMENTS}) FROM PUBLIC;
    ${grantExecuteSql(
      `${schema}.enqueue_workflow(${ENQUEUE_WORKFLOW_VERSIONED_ARGUMENTS})`,
      'SELECT grantee FROM enqueue_workflow_grantees',
    )}
  `,
};

/**
 * `<schema>.enqueue_workflow(...)` as migrations 014 and 019 made it, with a version and a check of the name: see
 * those migrations for the rules it keeps. With `readyRows` (migration 025), replacing the function in place (its
 * grants kept), it writes the new workflow's ready row (see `ready-rows.sql.ts`) with the row.
 */
export function enqueueWorkflowFunction(schema: string, readyRows = false): string {
  return `
    CREATE ${readyRows ? 'OR REPLACE ' : ''}FUNCTION ${schema}.enqueue_workflow(
      queue_name       text,
      workflow_name    text,
      args             json DEFAULT '[]',
      deduplication_id text DEFAULT NULL,
      new_workflow_id  text DEFAULT NULL,
      delay_ms         double precision DEFAULT NULL,
      priority         integer DEFAULT 0,
      partition_key    text DEFAULT NULL,
      on_duplicate     text DEFAULT 'reject',
      workflow_version integer DEFAULT NULL
    ) RETURNS TABLE (workflow_id text, created boolean)
    LANGUAGE plpgsql VOLATILE ${DEFINER_FUNCTION} AS $fn$
    #variable_conflict use_column
    DECLARE
      new_id text := coalesce(enqueue_workflow.new_workflow_id, gen_random_uuid()::text);
      run_version integer;
      holder text;
      inserted text;
      other_queue text;
    BEGIN
      PERFORM ${schema}.assert_enqueue_input(enqueue_workflow.queue_name, enqueue_workflow.workflow_name,
        enqueue_workflow.args, enqueue_workflow.deduplication_id, enqueue_workflow.new_workflow_id,
        enqueue_workflow.partition_key);
      IF enqueue_workflow.delay_ms < 0 THEN
        RAISE EXCEPTION 'nest-dedup-queue: delay_ms must be 0 or more, got %', enqueue_workflow.delay_ms
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      IF enqueue_workflow.on_duplicate NOT IN ('reject', 'replace') THEN
        RAISE EXCEPTION 'nest-dedup-queue: on_duplicate must be ''reject'' or ''replace'' in SQL, got %',
          left(enqueue_workflow.on_duplicate, 50)
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      IF enqueue_workflow.workflow_version IS NOT NULL AND enqueue_workflow.workflow_version < 1 THEN
        RAISE EXCEPTION 'nest-dedup-queue: workflow_version must be 1 or more, got %', enqueue_workflow.workflow_version
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      IF NOT EXISTS (SELECT 1 FROM ${schema}.registered_workflows AS r
                     WHERE r.workflow_name = enqueue_workflow.workflow_name)
         AND NOT EXISTS (SELECT 1 FROM ${schema}.executors AS e WHERE e.workflows IS NULL) THEN
        RAISE EXCEPTION 'nest-dedup-queue: no process has registered a workflow named "%"',
          left(enqueue_workflow.workflow_name, 200)
          USING ERRCODE = 'invalid_parameter_value',
                HINT = 'Registered: ' || coalesce((SELECT string_agg(n, ', ' ORDER BY n) FROM (
                         SELECT DISTINCT r.workflow_name AS n FROM ${schema}.registered_workflows AS r
                         ORDER BY 1 LIMIT 50) AS names), 'none yet (boot a process that has the workflow)');
      END IF;
      run_version := coalesce(
        enqueue_workflow.workflow_version,
        (SELECT max((r.value ->> 'version')::int) FROM ${schema}.executors AS e,
                jsonb_array_elements(e.workflows) AS r(value)
         WHERE r.value ->> 'name' = enqueue_workflow.workflow_name),
        (SELECT max(r.version) FROM ${schema}.registered_workflows AS r
         WHERE r.workflow_name = enqueue_workflow.workflow_name),
        1);

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
        INSERT INTO ${schema}.workflow_queue AS w (workflow_id, queue_name, workflow_name, workflow_version, status,
            deduplication_id, active_deduplication_id, inputs, priority, partition_key, not_before)
        VALUES (new_id, enqueue_workflow.queue_name, enqueue_workflow.workflow_name, run_version, 'ENQUEUED',
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
        IF inserted IS NOT NULL THEN${
          readyRows
            ? `
          INSERT INTO ${schema}.workflow_ready (queue_name, priority, seq, workflow_id, partition_key)
          SELECT w.queue_name, w.priority, w.seq, w.workflow_id, w.partition_key FROM ${schema}.workflow_queue AS w
          WHERE w.queue_name = enqueue_workflow.queue_name AND w.workflow_id = new_id;`
            : ''
        }
          PERFORM pg_notify('${WAKE_UP_CHANNEL_PREFIX}' || ${schemaLiteral(schema)}, enqueue_workflow.queue_name);
          RETURN QUERY SELECT new_id, true;
          RETURN;
        END IF;
        IF enqueue_workflow.deduplication_id IS NULL THEN
          CONTINUE;
        END IF;
        IF enqueue_workflow.on_duplicate = 'replace' THEN
          UPDATE ${schema}.workflow_queue AS w
          SET inputs = enqueue_workflow.args, workflow_name = enqueue_workflow.workflow_name,
              workflow_version = run_version, updated_at = now()
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
    $fn$;`;
}
