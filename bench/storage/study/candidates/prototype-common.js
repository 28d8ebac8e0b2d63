'use strict';
// What the layouts prototyped in plain SQL share: their schema `s`, its queue and lease tables (as the module has
// them), daily partitions, the wake-up channel, and the study's queue and workflow names.
const { uuidv7 } = require('../uuidv7');

const S = 's';
const QUEUE = 'study';
const WORKFLOW_NAME = 'StudyTasks.noop';
const CHANNEL = 'dedup_queue_wake_up_s';
const AUTOVACUUM = `autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
  autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0`;

const BASE_DDL = `
  CREATE SCHEMA ${S};
  CREATE TABLE ${S}.queues (queue_name text PRIMARY KEY, paused boolean NOT NULL DEFAULT false);
  INSERT INTO ${S}.queues VALUES ('${QUEUE}', false);
  CREATE TABLE ${S}.executors (executor_id text PRIMARY KEY, heartbeat_at timestamptz NOT NULL DEFAULT now());
  CREATE SEQUENCE ${S}.workflow_seq;
`;

/** Daily partitions of `parents` (partitioned by a timestamptz) from yesterday through a week ahead (UTC). */
function partitionsSql(parents) {
  return `DO $do$
    DECLARE d date; parent text;
    BEGIN
      FOREACH parent IN ARRAY ARRAY[${parents.map((p) => `'${p}'`).join(', ')}] LOOP
        FOR d IN SELECT generate_series((now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 7, interval '1 day')::date LOOP
          EXECUTE format('CREATE TABLE ${S}.%I PARTITION OF ${S}.%I FOR VALUES FROM (%L) TO (%L)',
            parent || '_p' || to_char(d, 'YYYYMMDD'), parent, d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
        END LOOP;
      END LOOP;
    END $do$;`;
}

/** The lease row of the driver's executor. */
function registerExecutor(executorId) {
  return (client) =>
    client.query(
      `INSERT INTO ${S}.executors (executor_id) VALUES ($1) ON CONFLICT (executor_id) DO UPDATE SET heartbeat_at = now()`,
      [executorId],
    );
}

const executorId = () => `study-${process.pid}`;

/** The arrays of a batch of new workflows (generated time-ordered IDs), as the enqueue statements take them. */
function batchArrays(keys, inputBytes = 0) {
  return {
    ids: keys.map(() => uuidv7()),
    inputs: keys.map((key) => JSON.stringify([argumentsOf(key, inputBytes)])),
  };
}

/** A workflow's argument: its key, padded to `inputBytes` more bytes (the study's STUDY_INPUT_BYTES). */
function argumentsOf(key, inputBytes = 0) {
  return inputBytes > 0 ? { key, pad: 'x'.repeat(inputBytes) } : { key };
}

/** `$n` for the n-th parameter of a claim whose parameters start at `first`. */
const numbered = (first) => (n) => `$${first + n - 1}`;

/** The claimed rows of a statement whose rows are `{ workflow_id, claimed }` (claimed: JSON text or null). */
function splitOutcomeRows(rows) {
  let recorded = 0;
  const claimed = [];
  for (const row of rows) {
    if (row.claimed !== null) {
      const c = JSON.parse(row.claimed);
      claimed.push({ workflowId: c.workflow_id, attempt: c.attempts });
    } else if (row.workflow_id !== null) recorded++;
  }
  return { recorded, claimed };
}

module.exports = {
  S,
  QUEUE,
  WORKFLOW_NAME,
  CHANNEL,
  AUTOVACUUM,
  BASE_DDL,
  partitionsSql,
  registerExecutor,
  executorId,
  batchArrays,
  argumentsOf,
  numbered,
  splitOutcomeRows,
};
