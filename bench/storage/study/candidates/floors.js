'use strict';
/*
 * Two floors under candidate B, on B's tables and claim: what its drain would cost if the outcome statement did only
 * what storage needs. `b-floor`: the finished rows deleted and moved to the history, the next claim attached;
 * `b-floor-no-history`: deleted only, as graphile-worker does. Neither keeps a feature of the module's outcome
 * statement (retries, deduplication windows, follow-ups' hand-over, wake-ups, stream ends), so neither is a layout
 * to build: they say how much of B's cost per job is the storage and how much is the statement's features.
 */
const H = require('./hot-claim');
const B = require('./ready-apart');
const { S } = require('./prototype-common');

const { TABLE, LIST, FINISHED, claim } = B.parts;

/** The driver's outcome call binds these; a floor types them without using them. */
const UNUSED_PARAMETERS = `unused AS (SELECT $2::text[], $3::text[], $4::text[], $5::int[], $6::float8[], $9::text)`;

function floorOutcome({ history }) {
  return `WITH ${UNUSED_PARAMETERS},
    ended AS (
      DELETE FROM ${TABLE} AS w
      WHERE w.queue_name = $7 AND w.workflow_id = ANY($1::text[]) AND w.status = 'PENDING' AND w.executor_id = $8
      RETURNING w.*, 'SUCCESS'::text AS end_status, NULL::json AS end_output, NULL::json AS end_error, false AS keeps_key
    ),
    ${history ? `archived AS (INSERT INTO ${S}.workflow_history (${LIST}) ${FINISHED}),` : ''}
    ${claim(10, false)}
    SELECT workflow_id, NULL::text AS claimed FROM ended
    UNION ALL SELECT NULL, row_to_json(c)::text FROM claimed AS c`;
}

function floor({ id, label, history }) {
  const statements = { ...B.statements, outcome: floorOutcome({ history }) };
  return { ...B, id, label, statements, ...H.driverCalls(statements) };
}

module.exports = {
  bFloor: () =>
    floor({ id: 'b-floor', label: "B's floor: delete, history row, next claim (no features)", history: true }),
  bFloorNoHistory: () =>
    floor({ id: 'b-floor-no-history', label: "B's floor without history: delete, next claim", history: false }),
};
