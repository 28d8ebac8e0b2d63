'use strict';
/*
 * Candidate D, "ready in place": B's claim without B's ready rows. The active table keeps its wide row and a ready
 * index of its own, (queue, priority, seq), whose condition names only columns a claim does not change
 * (`completed_at`: a key record's is set; `suspended_at`: set while a workflow waits or is a dead letter), so that a
 * claim is a HOT update that leaves the index entry where it is. A claim reads the index in order and passes over
 * the rows it finds PENDING (about as many as run at once; a finished row's entry is dropped by the next scan that
 * finds it dead) and the delayed rows that are not due, as 1.0's claim does. Enqueue writes one row and 3 index
 * entries (as 1.0); the drain deletes one row per job, not two (B also deletes the ready row).
 *
 * What it would keep, and how (prototyped: the W2 path): what B keeps, except that delayed and retried workflows stay
 * in the ready index (their start time checked on the row, as in 1.0), waiting ones leave it by `suspended_at` (the
 * index on `(queue, not_before)` for due sleepers takes the same condition, reversed), and no ready or timer rows
 * are written: the moves into and out of ENQUEUED change no other table, only `suspended_at` when a workflow starts or
 * stops waiting. Global concurrency counts and recovery need what B needs (no index may name the status or the
 * executor).
 */
const H = require('./hot-claim');
const B = require('./ready-apart');

const { TABLE, ddlWith, outcomeWith } = B.parts;

/** On `w`: the rows the ready index holds (ENQUEUED or PENDING: a claim does not change `line_state`). */
const IN_READY_INDEX = 'w.line_state = 1';

const DDL = ddlWith({
  moreColumns: `
    line_state smallint GENERATED ALWAYS AS (
      CASE WHEN status IN ('ENQUEUED', 'PENDING') THEN 1 WHEN status = 'WAITING' THEN 2 ELSE 0 END) STORED,`,
  readyDdl: `
  CREATE INDEX workflow_queue_ready ON ${TABLE} (queue_name, priority, seq) WHERE line_state = 1;
  CREATE INDEX workflow_queue_waiting ON ${TABLE} (queue_name, not_before) WHERE line_state = 2;`,
});

const claim = (first, withoutFlush) =>
  H.claimCtes({
    table: TABLE,
    first,
    withoutFlush,
    returning: 'w.inputs::text AS inputs, w.trace_context',
    readyInPlace: IN_READY_INDEX,
  });

const STATEMENTS = {
  claim: `WITH ${claim(1, true)} SELECT * FROM claimed`,
  outcome: outcomeWith(claim, false),
  enqueue: B.statements.enqueue.replace(H.ENQUEUE_READY, H.ENQUEUE_WAKE_UP),
};

module.exports = {
  ...B,
  parts: undefined,
  id: 'd-ready-in-place',
  label: 'D: ready in place (B without ready rows), HOT claim',
  ddl: DDL,
  statements: STATEMENTS,
  ...H.driverCalls(STATEMENTS),
};
