import { WAKE_UP_CHANNEL_PREFIX } from '../connection/notification-channels';
import type { Migration } from './migration.interface';

/** NOTE: a literal, not `MAX_KEY_LENGTH`: a released migration never changes. */
const MAX_KEY_LENGTH = 255;

/** The schema's name as an SQL string literal, from its quoted identifier (`"dedup_queue"` → `'dedup_queue'`). */
function schemaLiteral(schemaSql: string): string {
  const name = schemaSql.replace(/^"|"$/g, '').replace(/""/g, '"');
  return `'${name.replace(/'/g, "''")}'`;
}

/**
 * The `search_path` of every function of the schema from 019 on, which a caller cannot change: no object of the
 * caller's (a `json_typeof` of its own in its schema or in `pg_temp`) runs inside; everything there is
 * schema-qualified or in `pg_catalog`.
 */
export const PINNED_SEARCH_PATH = 'SET search_path = pg_catalog, pg_temp';

/**
 * `enqueue_workflow` runs with its owner's rights, so that a caller needs no right on the tables, and the pinned
 * `search_path`. A later redefinition of it keeps this header.
 */
export const DEFINER_FUNCTION = `SECURITY DEFINER ${PINNED_SEARCH_PATH}`;

/** `enqueue_workflow`'s argument types, which name it in GRANT and REVOKE. */
export const ENQUEUE_WORKFLOW_ARGUMENTS = 'text, text, json, text, text, double precision, integer, text, text';

/**
 * Grants EXECUTE on `functionSql` (schema-qualified, with its argument types) to each role that `granteesSql`
 * selects (`grantee oid`: 0 is PUBLIC). A later redefinition with another signature (a new function) passes the
 * grantees of the one it replaces, so that a role allowed to enqueue keeps that right.
 */
export function grantExecuteSql(functionSql: string, granteesSql: string): string {
  return `
    DO $grants$
    DECLARE
      role_name text;
    BEGIN
      FOR role_name IN
        SELECT DISTINCT CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END
        FROM (${granteesSql}) AS g
      LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s', '${functionSql.replace(/'/g, "''")}', role_name);
      END LOOP;
    END
    $grants$;`;
}

/**
 * Enqueue from SQL with bounded input and least privilege (1.1.0).
 *
 * - `<schema>.input_limits`: one row, the limits of `forRoot({ inputLimits })` (the size and depth of the arguments'
 *   JSON), written by each process at boot; here with the defaults. Keys are at most 255 characters, as in `enqueue`.
 * - `<schema>.assert_enqueue_input(...)`: the checks of an enqueue's queue, workflow name, arguments and keys, as
 *   `enqueue` makes them, each a SQLSTATE 22023 (`invalid_parameter_value`) before anything is written: an
 *   undeclared queue, an empty or over-long workflow name, `args` that is not a JSON array or is over the limits, an
 *   empty or over-long key. A later redefinition of `enqueue_workflow` calls it first.
 * - `<schema>.enqueue_workflow(...)`, the same signature and rules as 014, now `SECURITY DEFINER` with a pinned
 *   `search_path` (`DEFINER_FUNCTION`): a role needs no right on the tables to call it, only USAGE on the schema and
 *   EXECUTE on the function (an enqueue-only role; see docs/production.md, "Security"). EXECUTE is no longer
 *   PUBLIC's: the roles that held INSERT on the active table (who could call it before) are granted it.
 * - No function created later in the schema by the migrating role is executable by PUBLIC.
 *
 * Backward compatible with 1.0: a new table, a function in place of the same signature; a 1.0 process neither reads
 * nor writes the limits (the SQL function applies them to every SQL caller).
 */
export const enqueueFromSqlSecured: Migration = {
  version: 19,
  name: 'enqueue-from-sql-secured',
  up: (schema) => `
    CREATE TABLE ${schema}.input_limits (
      single          boolean PRIMARY KEY DEFAULT true CHECK (single),
      max_value_bytes integer NOT NULL,
      max_depth       integer NOT NULL
    );
    INSERT INTO ${schema}.input_limits (max_value_bytes, max_depth) VALUES (4194304, 64);

    CREATE FUNCTION ${schema}.assert_enqueue_input(
      queue_name       text,
      workflow_name    text,
      args             json,
      deduplication_id text,
      new_workflow_id  text,
      partition_key    text
    ) RETURNS void
    LANGUAGE plpgsql STABLE ${PINNED_SEARCH_PATH} AS $fn$
    DECLARE
      max_value_bytes integer;
      max_depth integer;
      brackets text;
      key_name text;
      key_value text;
    BEGIN
      SELECT l.max_value_bytes, l.max_depth INTO STRICT max_value_bytes, max_depth FROM ${schema}.input_limits AS l;
      IF NOT EXISTS (SELECT 1 FROM ${schema}.queues AS q WHERE q.queue_name = assert_enqueue_input.queue_name) THEN
        RAISE EXCEPTION 'nest-dedup-queue: unknown queue "%"', left(assert_enqueue_input.queue_name, 200)
          USING ERRCODE = 'invalid_parameter_value',
                HINT = 'Declare it in DedupQueueModule.forRoot({ queues }) or registerQueue() and boot a process once.';
      END IF;
      IF coalesce(assert_enqueue_input.workflow_name, '') = ''
         OR char_length(assert_enqueue_input.workflow_name) > 255 THEN
        RAISE EXCEPTION 'nest-dedup-queue: workflow_name must be a registered workflow name (Class.method), '
          '1 to 255 characters'
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      IF assert_enqueue_input.args IS NULL OR json_typeof(assert_enqueue_input.args) <> 'array' THEN
        RAISE EXCEPTION 'nest-dedup-queue: args must be a JSON array of the arguments, got %',
          coalesce(json_typeof(assert_enqueue_input.args), 'NULL')
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      IF octet_length(assert_enqueue_input.args::text) > max_value_bytes THEN
        RAISE EXCEPTION 'nest-dedup-queue: args is % bytes of JSON, over the limit of % (inputLimits.maxValueBytes)',
          octet_length(assert_enqueue_input.args::text), max_value_bytes
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      -- The nesting depth: strings taken out, then the innermost pairs of brackets removed once per level.
      brackets := regexp_replace(
        regexp_replace(assert_enqueue_input.args::text, '"(?:[^"\\\\]|\\\\.)*"', '', 'g'), '[^][{}]', '', 'g');
      FOR level IN 1..max_depth LOOP
        EXIT WHEN brackets = '';
        brackets := regexp_replace(brackets, '\\[\\]|\\{\\}', '', 'g');
      END LOOP;
      IF brackets <> '' THEN
        RAISE EXCEPTION 'nest-dedup-queue: args is nested deeper than % levels of arrays and objects '
          '(inputLimits.maxDepth)', max_depth
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      FOR key_name, key_value IN VALUES
        ('deduplication_id', assert_enqueue_input.deduplication_id),
        ('new_workflow_id', assert_enqueue_input.new_workflow_id),
        ('partition_key', assert_enqueue_input.partition_key)
      LOOP
        IF key_value = '' OR char_length(key_value) > ${MAX_KEY_LENGTH} THEN
          RAISE EXCEPTION 'nest-dedup-queue: % must be 1 to ${MAX_KEY_LENGTH} characters, got %',
            key_name, char_length(key_value)
            USING ERRCODE = 'invalid_parameter_value';
        END IF;
      END LOOP;
    END
    $fn$;

    CREATE OR REPLACE FUNCTION ${schema}.enqueue_workflow(
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
    LANGUAGE plpgsql VOLATILE ${DEFINER_FUNCTION} AS $fn$
    #variable_conflict use_column
    DECLARE
      new_id text := coalesce(enqueue_workflow.new_workflow_id, gen_random_uuid()::text);
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

    ALTER DEFAULT PRIVILEGES IN SCHEMA ${schema} REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
    REVOKE ALL ON FUNCTION ${schema}.assert_enqueue_input(text, text, json, text, text, text) FROM PUBLIC;
    REVOKE ALL ON FUNCTION ${schema}.enqueue_workflow(${ENQUEUE_WORKFLOW_ARGUMENTS}) FROM PUBLIC;
    ${grantExecuteSql(
      `${schema}.enqueue_workflow(${ENQUEUE_WORKFLOW_ARGUMENTS})`,
      `SELECT a.grantee FROM pg_class AS c, aclexplode(c.relacl) AS a
       WHERE c.oid = '${schema}.workflow_queue'::regclass AND a.privilege_type = 'INSERT' AND a.grantee <> c.relowner`,
    )}
  `,
};
