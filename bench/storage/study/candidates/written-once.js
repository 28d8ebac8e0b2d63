'use strict';
/*
 * Candidate C, "written once": what the caller gave is written once, at enqueue, where it stays until retention
 * drops its day (`workflow_inputs`, partitioned by creation day, one B-tree on the time-ordered workflow ID); what
 * changes while a workflow is unfinished is a narrow row (`workflow_state`: status, run, key, limits) whose claim is
 * a HOT update (nothing a claim changes is indexed; fillfactor 45: a claimed version, with its executor and start
 * time, is about 30% wider than the queued one, and a claim of 32 rows cannot reuse the room of the versions it
 * replaces); what a claim must find is a narrow row of
 * `workflow_ready` that the claim deletes; a finish deletes the state row and appends a narrow outcome row
 * (`workflow_outcomes`, partitioned like the inputs, one B-tree on the workflow ID and a BRIN on completed_at; with
 * its queue and workflow name, so that a list filters finished workflows without reading their inputs). A
 * finished workflow is its inputs row and its outcome row: two index entries, both at a right edge. After a checkpoint
 * a drain rewrites no page of the wide rows (no full-page image of them), and the arguments are logged once.
 *
 * Its hot statements are written so that their generic plan is the right one (index probes bounded by the IDs
 * and keys they are given: `= ANY(array)`, never a join the planner may turn into a scan of the queue), and its
 * sessions plan them once (`plan_cache_mode = force_generic_plan`).
 *
 * What it keeps, and how (prototyped: the W2 path; the rest as the rebuild plan says):
 *  - deduplication key: a partial unique index on the state row (queue, active_deduplication_id); windows: the
 *    state row stays as the key record (narrow), with the finished status and dedup_expires_at; queue-next
 *    follow-ups: the follow-up index on the state rows, handed over in the ending statement (ready row inserted then);
 *  - delayed, retried and waiting workflows: a row in `workflow_timers`, moved to ready when due;
 *  - recovery: the state rows of a dead executor, by a scan of the queue's (narrow) state rows, once per dead
 *    executor; timeouts: the deadline index (only timed workflows' claims are not HOT);
 *  - concurrency and rate limits: rows of their own (`workflow_running`, `queue_starts`) for limited queues only.
 */
const C = require('./prototype-common');
const H = require('./hot-claim');
const { S, QUEUE, WORKFLOW_NAME } = C;

const STATE_COLUMNS = `
  queue_name text NOT NULL, workflow_id text NOT NULL, created_at timestamptz NOT NULL,
  seq bigint NOT NULL DEFAULT nextval('${S}.workflow_seq'), workflow_name text NOT NULL,
  priority integer NOT NULL DEFAULT 0, partition_key text, parent_workflow_id text, timeout_ms integer,
  max_attempts integer NOT NULL DEFAULT 1, max_recovery_attempts integer NOT NULL DEFAULT 10, dedup_window_ms integer,
  release_key_on_error boolean NOT NULL DEFAULT false, start_deadline timestamptz,
  active_deduplication_id text, next_deduplication_id text, dedup_expires_at timestamptz, waiting_topic text,
  messages_sent integer NOT NULL DEFAULT 0, failed_attempts integer NOT NULL DEFAULT 0,
  recovery_attempts integer NOT NULL DEFAULT 0, not_before timestamptz, deadline_at timestamptz, status text NOT NULL,
  executor_id text, attempts integer NOT NULL DEFAULT 0, started_at timestamptz,
  updated_at timestamptz NOT NULL DEFAULT now()`;
const STATE_NAMES = STATE_COLUMNS.split(/,\s*\n|,\s+(?=[a-z_]+ [a-z])/).map((part) => part.trim().split(/\s+/)[0]);

const DDL = `${C.BASE_DDL}
  CREATE TABLE ${S}.workflow_inputs (
    queue_name text NOT NULL, workflow_id text NOT NULL, created_at timestamptz NOT NULL, workflow_name text NOT NULL,
    deduplication_id text, priority integer NOT NULL DEFAULT 0, partition_key text, inputs json NOT NULL,
    timeout_ms integer, max_attempts integer NOT NULL DEFAULT 1, max_recovery_attempts integer NOT NULL DEFAULT 10,
    dedup_window_ms integer, release_key_on_error boolean NOT NULL DEFAULT false, trace_context text,
    parent_workflow_id text, supersedes text
  ) PARTITION BY RANGE (created_at);
  CREATE TABLE ${S}.workflow_outcomes (
    queue_name text NOT NULL, workflow_id text NOT NULL, created_at timestamptz NOT NULL, workflow_name text NOT NULL,
    status text NOT NULL, output json, error json, executor_id text, attempts integer NOT NULL, failed_attempts integer NOT NULL,
    recovery_attempts integer NOT NULL, started_at timestamptz, completed_at timestamptz NOT NULL DEFAULT now(),
    superseded_by text
  ) PARTITION BY RANGE (created_at);
  ${C.partitionsSql(['workflow_inputs', 'workflow_outcomes'])}
  CREATE INDEX workflow_inputs_workflow_id ON ${S}.workflow_inputs (workflow_id);
  CREATE INDEX workflow_outcomes_workflow_id ON ${S}.workflow_outcomes (workflow_id);
  CREATE INDEX workflow_outcomes_completed_at ON ${S}.workflow_outcomes USING brin (completed_at);
  CREATE INDEX workflow_inputs_created_at ON ${S}.workflow_inputs USING brin (created_at);

  CREATE TABLE ${S}.workflow_state (${STATE_COLUMNS}, PRIMARY KEY (queue_name, workflow_id))
    WITH (fillfactor = 45, ${C.AUTOVACUUM});
  CREATE UNIQUE INDEX workflow_state_deduplication_key ON ${S}.workflow_state (queue_name, active_deduplication_id)
    WHERE active_deduplication_id IS NOT NULL;
  CREATE UNIQUE INDEX workflow_state_follow_up_key ON ${S}.workflow_state (queue_name, next_deduplication_id)
    WHERE next_deduplication_id IS NOT NULL;
  CREATE INDEX workflow_state_children ON ${S}.workflow_state (queue_name, parent_workflow_id)
    WHERE parent_workflow_id IS NOT NULL;
  CREATE INDEX workflow_state_deadline ON ${S}.workflow_state (queue_name, deadline_at) WHERE deadline_at IS NOT NULL;

  ${H.READY_AND_TIMERS_DDL}
`;

const TABLE = `${S}.workflow_state`;

const claim = (first, withoutFlush, advisory) =>
  H.claimCtes({
    table: TABLE,
    first,
    withoutFlush,
    advisory,
    returning: 'w.created_at',
    more: `,
    claimed_with_inputs AS (
      SELECT c.*, i.inputs, i.trace_context FROM claimed AS c
      CROSS JOIN LATERAL (
        SELECT inputs::text AS inputs, trace_context FROM ${S}.workflow_inputs
        WHERE queue_name = $${first} AND workflow_id = c.workflow_id AND created_at = c.created_at
      ) AS i
    )`,
  });

/** The state row that stays as a finished workflow's key record while its deduplication window is open. */
const KEY_RECORD = `SELECT ${STATE_NAMES.map(
  (n) =>
    ({
      status: 'e.end_status',
      next_deduplication_id: 'NULL',
      dedup_expires_at: `now() + e.dedup_window_ms * interval '1 millisecond'`,
      executor_id: 'NULL',
      updated_at: 'now()',
    })[n] ?? `e.${n}`,
).join(', ')} FROM ended AS e WHERE e.keeps_key`;

const statements = (advisory) => ({
  claim: `WITH ${claim(1, true, advisory)} SELECT * FROM claimed_with_inputs`,
  outcome: H.outcomeSql({
    table: TABLE,
    archived: `INSERT INTO ${S}.workflow_outcomes (queue_name, workflow_id, created_at, workflow_name, status, output,
                                         error, executor_id, attempts, failed_attempts, recovery_attempts, started_at,
                                         completed_at)
      SELECT queue_name, workflow_id, created_at, workflow_name, end_status, end_output, end_error, executor_id, attempts,
             failed_attempts + (end_status <> 'SUCCESS')::int, recovery_attempts, started_at, now()
      FROM ended`,
    keyRecords: `INSERT INTO ${TABLE} (${STATE_NAMES.join(', ')}) ${KEY_RECORD}`,
    claim: claim(10, false, advisory),
    claimed: 'claimed_with_inputs',
  }),
  enqueue: `WITH ${H.ENQUEUE_INPUT},
    inserted AS (
      INSERT INTO ${TABLE} (queue_name, workflow_id, created_at, workflow_name, priority, active_deduplication_id, status)
      SELECT $6, workflow_id, now(), workflow_name, priority, deduplication_id, 'ENQUEUED'
      FROM input ORDER BY deduplication_id, ord
      ON CONFLICT DO NOTHING
      RETURNING queue_name, workflow_id, created_at, priority, seq, workflow_name, partition_key, active_deduplication_id
    ),
    stored AS (
      INSERT INTO ${S}.workflow_inputs (queue_name, workflow_id, created_at, workflow_name, deduplication_id, priority,
                                       inputs)
      SELECT ins.queue_name, ins.workflow_id, ins.created_at, ins.workflow_name, ins.active_deduplication_id,
             ins.priority, i.inputs::json
      FROM inserted AS ins JOIN input AS i ON i.workflow_id = ins.workflow_id
    ),
    ${H.ENQUEUE_READY}
    ${H.holdersSql(TABLE)}`,
});

const SEED_SQL = `WITH seeds AS (
      SELECT uuidv7_at(t) AS id, i, t
      FROM generate_series(1, $1::int) AS i, LATERAL (SELECT now() - interval '1 hour' + i * interval '1 millisecond' AS t) AS x
    ),
    stored AS (
      INSERT INTO ${S}.workflow_inputs (queue_name, workflow_id, created_at, workflow_name, deduplication_id, inputs)
      SELECT '${QUEUE}', id, t, '${WORKFLOW_NAME}', 'old' || i, json_build_array(json_build_object('key', 'old' || i))
      FROM seeds
    )
    INSERT INTO ${S}.workflow_outcomes (queue_name, workflow_id, created_at, workflow_name, status, executor_id,
                                       attempts, failed_attempts, recovery_attempts, started_at, completed_at)
    SELECT '${QUEUE}', id, t, '${WORKFLOW_NAME}', 'SUCCESS', 'seed', 1, 0, 0, t, t FROM seeds`;

/** Candidate C; `advisory`: its claim skips taken ready rows by advisory locks instead of row locks (no LOCK record). */
function writtenOnce({ advisory = false } = {}) {
  const STATEMENTS = statements(advisory);
  return {
    id: advisory ? 'c-advisory' : 'c-written-once',
    planCacheMode: 'force_generic_plan',
    label: advisory
      ? "C with advisory locks in the claim (no row lock's WAL record)"
      : 'C: written once (inputs + narrow state + ready + outcomes)',
    ddl: DDL,
    seedSql: SEED_SQL,
    statements: STATEMENTS,
    ...H.driverCalls(STATEMENTS),
  };
}

module.exports = { writtenOnce, ...writtenOnce() };
