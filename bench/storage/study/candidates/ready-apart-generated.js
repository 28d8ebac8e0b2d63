'use strict';
/*
 * Candidate B with the indexes it drops put back on stored generated columns: what layout B costs once it keeps
 * the running counts, the waiting workflows' wake-ups and the deadline sweep indexed. PostgreSQL takes an update as
 * HOT when no indexed value changes, comparing values, not the columns an UPDATE names; a generated column whose
 * value a claim leaves as it was (NULL before and after, or false) keeps the claim HOT while the status it is
 * computed from changes. So:
 *  - `counted_running` (true while a row of a queue with global limits runs; `counted` is set by such a queue's
 *    claim) indexes the running workflows a limited queue counts; other queues' claims leave it false;
 *  - `wake_at` (`not_before` while WAITING) indexes the sleepers' wake-ups;
 *  - `live_deadline_at` (`deadline_at` while the workflow can still run) indexes the deadline sweep without the
 *    status in a predicate.
 * Only the ready rows stay apart: a claim must take a row out of what the next claim reads, which is an index entry
 * moved whatever the column. The statements are B's (they do not read these columns).
 */
const H = require('./hot-claim');
const B = require('./ready-apart');
const { S } = require('./prototype-common');

const GENERATED_COLUMNS = `
  counted boolean NOT NULL DEFAULT false,
  counted_running boolean GENERATED ALWAYS AS (counted AND status = 'PENDING') STORED,
  wake_at timestamptz GENERATED ALWAYS AS (CASE WHEN status = 'WAITING' THEN not_before END) STORED,
  live_deadline_at timestamptz GENERATED ALWAYS AS
    (CASE WHEN status IN ('ENQUEUED', 'PENDING', 'WAITING') THEN deadline_at END) STORED,`;

const GENERATED_INDEXES = `
  DROP INDEX ${S}.workflow_queue_deadline;
  CREATE INDEX workflow_queue_deadline ON ${B.parts.TABLE} (queue_name, live_deadline_at)
    WHERE live_deadline_at IS NOT NULL;
  CREATE INDEX workflow_queue_running ON ${B.parts.TABLE} (queue_name, partition_key) WHERE counted_running;
  CREATE INDEX workflow_queue_waiting ON ${B.parts.TABLE} (queue_name, wake_at) WHERE wake_at IS NOT NULL;`;

module.exports = {
  ...B,
  id: 'b-generated',
  label: 'B with its running, waiting and deadline indexes on generated columns',
  ddl: B.parts.ddlWith({ moreColumns: GENERATED_COLUMNS, readyDdl: `${H.READY_AND_TIMERS_DDL}${GENERATED_INDEXES}` }),
  ...H.driverCalls(B.statements),
};
