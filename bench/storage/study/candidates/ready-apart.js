'use strict';
/*
 * Candidate B, "ready apart": 1.0's wide active row stays, but nothing a claim changes is indexed, so that a claim
 * is a HOT update (the row's new version on its own page, no index entry): no status in any index predicate, no
 * index on the executor; fillfactor 50 leaves room on each page for a claimed version of every row (a claim takes
 * 32 rows at once, so the versions it writes cannot reuse the room of the ones it replaces). What a claim must find is
 * a narrow row in `workflow_ready` (queue, priority, seq, workflow ID, name), one per due workflow, which the claim
 * deletes. A finish moves the row to the history as 1.0 does, whose only B-tree is on the workflow ID (time-ordered
 * IDs: appended at its right edge), with a BRIN on completed_at for time-windowed lists.
 *
 * Its hot statements are written so that their generic plan is the right one (index probes bounded by the IDs
 * and keys they are given: `= ANY(array)`, never a join the planner may turn into a scan of the queue), and its
 * sessions plan them once (`plan_cache_mode = force_generic_plan`).
 *
 * What it keeps, and how (prototyped: the W2 path; the rest as the rebuild plan says):
 *  - deduplication key: the same partial unique index on (queue, active_deduplication_id); windows: a key record
 *    left in the active table, as 1.0; queue-next follow-ups: the follow-up index, handed over in the ending
 *    statement (the follow-up's ready row is inserted then);
 *  - delayed, retried and waiting workflows: a row in `workflow_timers` (queue, due time), moved to ready when due;
 *  - recovery: the PENDING rows of an executor found by scanning the queue's active rows, once per dead executor
 *    (no index on executor_id); timeouts: the deadline index (only timed workflows' claims are not HOT);
 *  - concurrency and rate limits: rows of their own (`workflow_running`, `queue_starts`), for limited queues only.
 */
const C = require('./prototype-common');
const H = require('./hot-claim');
const { S, QUEUE, WORKFLOW_NAME } = C;

/** Immutable columns first, the ones a claim changes last: a HOT update logs only the changed tail of the row. */
const COLUMNS = `
  queue_name text NOT NULL, workflow_id text NOT NULL, seq bigint NOT NULL DEFAULT nextval('${S}.workflow_seq'),
  workflow_name text NOT NULL, deduplication_id text, priority integer NOT NULL DEFAULT 0, partition_key text,
  inputs json NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), timeout_ms integer,
  max_attempts integer NOT NULL DEFAULT 1, max_recovery_attempts integer NOT NULL DEFAULT 10, dedup_window_ms integer,
  release_key_on_error boolean NOT NULL DEFAULT false, trace_context text, parent_workflow_id text,
  start_deadline timestamptz, superseded_by text, supersedes text,
  active_deduplication_id text, next_deduplication_id text, waiting_topic text, messages_sent integer NOT NULL DEFAULT 0,
  output json, error json, dedup_expires_at timestamptz, completed_at timestamptz,
  failed_attempts integer NOT NULL DEFAULT 0, recovery_attempts integer NOT NULL DEFAULT 0, not_before timestamptz,
  deadline_at timestamptz, status text NOT NULL, executor_id text, attempts integer NOT NULL DEFAULT 0,
  started_at timestamptz, updated_at timestamptz NOT NULL DEFAULT now()`;
const NAMES = COLUMNS.split(',\n')
  .flatMap((line) => line.split(/,\s+(?=[a-z_]+ [a-z])/))
  .map((part) => part.trim().split(/\s+/)[0]);
const LIST = NAMES.join(', ');

const TABLE = `${S}.workflow_queue`;

/**
 * The active table (`moreColumns` after B's, fillfactor 50), its indexes that a claim does not move, `readyDdl`, and
 * the history.
 */
const ddlWith = ({ moreColumns = '', readyDdl }) => `${C.BASE_DDL}
  CREATE TABLE ${TABLE} (${COLUMNS},${moreColumns} PRIMARY KEY (queue_name, workflow_id))
    WITH (fillfactor = 50, ${C.AUTOVACUUM});
  CREATE UNIQUE INDEX workflow_queue_deduplication_key ON ${TABLE} (queue_name, active_deduplication_id)
    WHERE active_deduplication_id IS NOT NULL;
  CREATE UNIQUE INDEX workflow_queue_follow_up_key ON ${TABLE} (queue_name, next_deduplication_id)
    WHERE next_deduplication_id IS NOT NULL;
  CREATE INDEX workflow_queue_children ON ${TABLE} (queue_name, parent_workflow_id)
    WHERE parent_workflow_id IS NOT NULL;
  CREATE INDEX workflow_queue_deadline ON ${TABLE} (queue_name, deadline_at) WHERE deadline_at IS NOT NULL;
  ${readyDdl}
  CREATE TABLE ${S}.workflow_history (${COLUMNS}) PARTITION BY RANGE (created_at);
  ${C.partitionsSql(['workflow_history'])}
  CREATE INDEX workflow_history_workflow_id ON ${S}.workflow_history (workflow_id);
  CREATE INDEX workflow_history_completed_at ON ${S}.workflow_history USING brin (completed_at);
`;

const DDL = ddlWith({ readyDdl: H.READY_AND_TIMERS_DDL });

const claim = (first, withoutFlush) =>
  H.claimCtes({ table: TABLE, first, withoutFlush, returning: 'w.inputs::text AS inputs, w.trace_context' });

/** The finished row, as the history and a key record take it, over `ended` (`e`). */
const FINISHED = `SELECT ${NAMES.map(
  (n) =>
    ({
      status: 'e.end_status',
      output: 'e.end_output',
      error: 'e.end_error',
      active_deduplication_id: 'CASE WHEN e.keeps_key THEN e.active_deduplication_id END',
      next_deduplication_id: 'NULL',
      dedup_expires_at: `CASE WHEN e.keeps_key THEN now() + e.dedup_window_ms * interval '1 millisecond' END`,
      completed_at: 'now()',
      updated_at: 'now()',
      failed_attempts: `e.failed_attempts + (e.end_status <> 'SUCCESS')::int`,
    })[n] ?? `e.${n}`,
).join(', ')} FROM ended AS e`;

/** The outcome statement over B's table and history, with the claim `claimWith` builds attached. */
const outcomeWith = (claimWith, readyRows = true) =>
  H.outcomeSql({
    table: TABLE,
    archived: `INSERT INTO ${S}.workflow_history (${LIST}) ${FINISHED}`,
    keyRecords: `INSERT INTO ${TABLE} (${LIST}) ${FINISHED} WHERE e.keeps_key`,
    retrySet: ', error = o.error::json',
    claim: claimWith(10, false),
    claimed: 'claimed',
    readyRows,
  });

const STATEMENTS = {
  claim: `WITH ${claim(1, true)} SELECT * FROM claimed`,
  outcome: outcomeWith(claim),
  enqueue: `WITH ${H.ENQUEUE_INPUT},
    inserted AS (
      INSERT INTO ${TABLE} (queue_name, workflow_id, workflow_name, deduplication_id, active_deduplication_id,
                                      priority, inputs, status)
      SELECT $6, workflow_id, workflow_name, deduplication_id, deduplication_id, priority, inputs::json, 'ENQUEUED'
      FROM input ORDER BY deduplication_id, ord
      ON CONFLICT DO NOTHING
      RETURNING queue_name, priority, seq, workflow_id, workflow_name, partition_key, active_deduplication_id
    ),
    ${H.ENQUEUE_READY}
    ${H.holdersSql(TABLE)}`,
};

const SEED_SQL = `INSERT INTO ${S}.workflow_history (queue_name, workflow_id, workflow_name, deduplication_id, inputs, created_at,
      status, executor_id, attempts, started_at, completed_at, updated_at)
    SELECT '${QUEUE}', uuidv7_at(t), '${WORKFLOW_NAME}', 'old' || i, json_build_array(json_build_object('key', 'old' || i)), t,
           'SUCCESS', 'seed', 1, t, t, t
    FROM generate_series(1, $1::int) AS i, LATERAL (SELECT now() - interval '1 hour' + i * interval '1 millisecond' AS t) AS x`;

module.exports = {
  /** Its table, column list, claim and finished row, for the floors measured beside it (`floors.js`). */
  parts: { TABLE, LIST, FINISHED, claim, ddlWith, outcomeWith },
  id: 'b-ready-apart',
  planCacheMode: 'force_generic_plan',
  label: 'B: ready apart, HOT claim, history by ID',
  ddl: DDL,
  seedSql: SEED_SQL,
  statements: STATEMENTS,
  ...H.driverCalls(STATEMENTS),
};
