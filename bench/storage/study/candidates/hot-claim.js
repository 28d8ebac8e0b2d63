'use strict';
// What candidates B and C share: the narrow ready and timer tables, a claim that deletes ready rows and HOT-updates
// the rows it claims, the outcome statement that ends or retries them with the next claim attached, and the driver's
// calls of those statements. Each candidate gives its table of unfinished workflows and what it does differently.
const C = require('./prototype-common');
const { S, QUEUE, WORKFLOW_NAME, CHANNEL } = C;

const READY_AND_TIMERS_DDL = `
  CREATE TABLE ${S}.workflow_ready (
    queue_name text NOT NULL, priority integer NOT NULL, seq bigint NOT NULL, workflow_id text NOT NULL,
    workflow_name text NOT NULL, partition_key text
  ) WITH (${C.AUTOVACUUM});
  CREATE UNIQUE INDEX workflow_ready_order ON ${S}.workflow_ready (queue_name, priority, seq);
  CREATE INDEX workflow_ready_partition ON ${S}.workflow_ready (queue_name, partition_key, priority, seq)
    WHERE partition_key IS NOT NULL;
  CREATE TABLE ${S}.workflow_timers (
    queue_name text NOT NULL, due_at timestamptz NOT NULL, workflow_id text NOT NULL,
    PRIMARY KEY (queue_name, due_at, workflow_id)
  );
`;

/**
 * The claim's CTEs, parameters from `first` ($+0 queue, $+1 executor, $+2 workflow names, $+3 how many): `picked`
 * (ready rows, locked), `taken` (deleted), `claimed` (the rows of `table` made PENDING, returning `returning`), and
 * `more` CTEs after them. Every step is bounded by the rows before it (`= ANY(array)`), so that its generic plan is
 * index probes whatever the tables' sizes. `readyInPlace`: the condition (on `w`) of an index of `table` itself that
 * a claim does not move (candidate D): `picked` reads `table` through it, and there are no ready rows to take.
 */
function claimCtes({ table, first, withoutFlush, returning, more = '', advisory = false, readyInPlace }) {
  const p = C.numbered(first);
  if (readyInPlace) {
    const picked = `picked AS (
      SELECT w.workflow_id FROM ${table} AS w
      WHERE w.queue_name = ${p(1)} AND ${readyInPlace} AND w.status = 'ENQUEUED'
        AND (w.not_before IS NULL OR w.not_before <= now()) AND w.workflow_name = ANY(${p(3)}::text[])
        AND NOT EXISTS (SELECT 1 FROM ${S}.queues WHERE queue_name = ${p(1)} AND paused)
        AND EXISTS (SELECT 1 FROM ${S}.executors WHERE executor_id = ${p(2)})
      ORDER BY w.priority, w.seq LIMIT ${p(4)}
      FOR UPDATE SKIP LOCKED
    ),`;
    return picked + claimedCte({ table, p, withoutFlush, returning, more, from: 'picked' });
  }
  // NOTE: `advisory`: ready rows another claim is taking are skipped by a transaction-scoped advisory lock on their
  // seq instead of a row lock, which writes no WAL record; a row another claim deleted and committed meanwhile is
  // simply not deleted again (`taken` returns the rows this statement deleted).
  return `picked AS (
      SELECT r.priority, r.seq, r.workflow_id FROM ${S}.workflow_ready AS r
      WHERE r.queue_name = ${p(1)} AND r.workflow_name = ANY(${p(3)}::text[])
        AND NOT EXISTS (SELECT 1 FROM ${S}.queues WHERE queue_name = ${p(1)} AND paused)
        AND EXISTS (SELECT 1 FROM ${S}.executors WHERE executor_id = ${p(2)})
        ${advisory ? `AND pg_try_advisory_xact_lock(hashtext(${p(1)}), (r.seq % 2147483647)::int)` : ''}
      ORDER BY r.priority, r.seq LIMIT ${p(4)}
      ${advisory ? '' : 'FOR UPDATE SKIP LOCKED'}
    ),
    taken AS (
      DELETE FROM ${S}.workflow_ready AS r
      WHERE r.queue_name = ${p(1)} AND r.priority = ANY(ARRAY(SELECT priority FROM picked))
        AND r.seq = ANY(ARRAY(SELECT seq FROM picked))
      RETURNING r.workflow_id
    ),${claimedCte({ table, p, withoutFlush, returning, more, from: 'taken' })}`;
}

/** The claim's last CTEs: the rows of `table` whose IDs `from` gives, made PENDING (see `claimCtes`). */
function claimedCte({ table, p, withoutFlush, returning, more, from }) {
  return `${withoutFlush ? ` commit_without_flush AS (SELECT set_config('synchronous_commit', 'off', true)),` : ''}
    claimed AS (
      UPDATE ${table} AS w
      SET status = 'PENDING', executor_id = ${p(2)}, attempts = w.attempts + 1, started_at = clock_timestamp(),
          updated_at = now(),
          deadline_at = CASE WHEN w.timeout_ms IS NOT NULL
                             THEN coalesce(w.deadline_at, now() + w.timeout_ms * interval '1 millisecond') END
      WHERE w.queue_name = ${p(1)} AND w.workflow_id = ANY(ARRAY(SELECT workflow_id FROM ${from}))
        ${withoutFlush ? 'AND EXISTS (SELECT 1 FROM commit_without_flush)' : ''}
      RETURNING w.workflow_id, w.workflow_name, w.priority, w.seq, w.attempts, w.failed_attempts, w.max_attempts,
                w.max_recovery_attempts, (extract(epoch FROM w.deadline_at - now()) * 1000)::float8 AS remaining_ms,
                CASE WHEN w.attempts = w.failed_attempts + 1
                     THEN extract(epoch FROM w.started_at - greatest(w.created_at, w.not_before))::float8 END
                  AS wait_seconds, ${returning}
    )${more}`;
}

/**
 * The outcome statement with the next claim attached: $1 IDs, $2 statuses, $3 outputs, $4 errors, $5 runs, $6 retry
 * delays, $7 queue, $8 executor, $9 channel; the claim's from $10. Retries go back to ENQUEUED with a timer
 * (`retrySet`: more assignments), the others end: deleted from `table` (keeping `keeps_key`), `archived` and
 * `keyRecords` (CTE bodies over `ended`), the freed keys handed to waiting follow-ups with their ready rows.
 * `claimed` names the CTE of `claim` whose rows the statement returns. Without `readyRows` (candidate D), a retried or
 * handed-over row stays where it is: the ready index is on `table` itself, and no timer or ready row is written.
 */
function outcomeSql({ table, archived, keyRecords, retrySet = '', claim, claimed, readyRows = true }) {
  const owned = `w.queue_name = $7 AND w.workflow_id = ANY($1::text[]) AND w.workflow_id = o.workflow_id
        AND w.status = 'PENDING' AND w.executor_id = $8 AND w.attempts = o.attempt`;
  return `WITH o AS (
      SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::float8[])
        AS o(workflow_id, status, output, error, attempt, retry_delay_ms)
    ),
    retried AS (
      UPDATE ${table} AS w
      SET status = 'ENQUEUED', executor_id = NULL, updated_at = now(), failed_attempts = w.failed_attempts + 1,
          not_before = now() + o.retry_delay_ms * interval '1 millisecond'${retrySet}
      FROM o
      WHERE o.status = 'RETRY' AND ${owned}
      RETURNING w.queue_name, w.workflow_id, w.not_before
    ),
    ${
      readyRows
        ? `retry_timers AS (
      INSERT INTO ${S}.workflow_timers (queue_name, due_at, workflow_id) SELECT queue_name, not_before, workflow_id FROM retried
    ),`
        : ''
    }
    ended AS (
      DELETE FROM ${table} AS w USING o
      WHERE o.status <> 'RETRY' AND ${owned}
      RETURNING w.*, o.status AS end_status, o.output::json AS end_output, o.error::json AS end_error,
        (w.dedup_window_ms IS NOT NULL AND w.active_deduplication_id IS NOT NULL
         AND NOT (o.status = 'ERROR' AND w.release_key_on_error)
         AND NOT EXISTS (SELECT 1 FROM ${table} AS f
                         WHERE f.queue_name = $7 AND f.next_deduplication_id = w.active_deduplication_id OFFSET 0))
          AS keeps_key
    ),
    archived AS (${archived}),
    key_records AS (${keyRecords}),
    handed_over AS (
      UPDATE ${table} AS f
      SET active_deduplication_id = f.next_deduplication_id, next_deduplication_id = NULL, updated_at = now()
      WHERE f.queue_name = $7 AND f.status = 'ENQUEUED'
        AND f.next_deduplication_id = ANY(ARRAY(SELECT active_deduplication_id FROM ended WHERE NOT keeps_key))
      RETURNING f.queue_name, f.priority, f.seq, f.workflow_id, f.workflow_name, f.partition_key
    ),
    ${readyRows ? `handed_over_ready AS (INSERT INTO ${S}.workflow_ready SELECT * FROM handed_over),` : ''}
    hand_over_wake_ups AS (SELECT pg_notify($9, queue_name) FROM (SELECT DISTINCT queue_name FROM handed_over) AS q),
    ${claim}
    SELECT workflow_id, NULL::text AS claimed, (SELECT count(*) FROM hand_over_wake_ups) AS handed_over FROM ended
    UNION ALL SELECT workflow_id, NULL, NULL FROM retried
    UNION ALL SELECT NULL, row_to_json(c)::text, NULL FROM ${claimed} AS c`;
}

/** The driver's calls of a candidate's statements: `enqueue` ($1 IDs … $7 channel), `claim`, `outcome` (above). */
function driverCalls({ enqueue, claim, outcome }) {
  return {
    enqueueBatch: async (client, keys, inputBytes) => {
      const { ids, inputs } = C.batchArrays(keys, inputBytes);
      const { rows } = await client.query({
        name: 'enqueue',
        text: enqueue,
        values: [ids, keys.map(() => WORKFLOW_NAME), keys, inputs, keys.map(() => 0), QUEUE, CHANNEL],
      });
      return rows.filter((row) => row.inserted).length;
    },
    worker: () => {
      const executor = C.executorId();
      return {
        setup: C.registerExecutor(executor),
        claim: async (client, limit) => {
          const { rows } = await client.query({
            name: 'claim',
            text: claim,
            values: [QUEUE, executor, [WORKFLOW_NAME], limit],
          });
          return rows.map((row) => ({ workflowId: row.workflow_id, attempt: row.attempts }));
        },
        finish: async (client, claimed, limit) => {
          const { rows } = await client.query({
            name: 'outcome',
            text: outcome,
            values: [
              claimed.map((c) => c.workflowId),
              claimed.map(() => 'SUCCESS'),
              claimed.map(() => null),
              claimed.map(() => null),
              claimed.map((c) => c.attempt),
              claimed.map(() => null),
              QUEUE,
              executor,
              CHANNEL,
              QUEUE,
              executor,
              [WORKFLOW_NAME],
              limit,
            ],
          });
          return C.splitOutcomeRows(rows);
        },
      };
    },
  };
}

/** The enqueue's holder look-up: each refused row's holder (a key in `table` with its window open, or in the batch). */
function holdersSql(table) {
  return `SELECT (ins.workflow_id IS NOT NULL) AS inserted, coalesce(holder.workflow_id, in_batch.workflow_id) AS holder_id,
           (SELECT count(*) FROM woken) AS woken
    FROM input AS i
    LEFT JOIN inserted AS ins ON ins.workflow_id = i.workflow_id
    LEFT JOIN ${table} AS holder ON ins.workflow_id IS NULL AND holder.queue_name = $6
      AND holder.active_deduplication_id = i.deduplication_id
      AND (holder.dedup_expires_at IS NULL OR holder.dedup_expires_at > now())
    LEFT JOIN inserted AS in_batch ON ins.workflow_id IS NULL AND in_batch.active_deduplication_id = i.deduplication_id
    ORDER BY i.ord`;
}

/** The enqueue's input rows ($1 IDs, $2 names, $3 keys, $4 arguments, $5 priorities) and its wake-up ($7). */
const ENQUEUE_INPUT = `input AS (
      SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[])
        WITH ORDINALITY AS i(workflow_id, workflow_name, deduplication_id, inputs, priority, ord)
    )`;
const ENQUEUE_WAKE_UP = `woken AS (SELECT pg_notify($7, queue_name) FROM (SELECT DISTINCT queue_name FROM inserted) AS q)`;
const ENQUEUE_READY = `ready AS (
      INSERT INTO ${S}.workflow_ready SELECT queue_name, priority, seq, workflow_id, workflow_name, partition_key FROM inserted
    ),
    ${ENQUEUE_WAKE_UP}`;

module.exports = {
  READY_AND_TIMERS_DDL,
  claimCtes,
  outcomeSql,
  driverCalls,
  holdersSql,
  ENQUEUE_INPUT,
  ENQUEUE_READY,
  ENQUEUE_WAKE_UP,
};
