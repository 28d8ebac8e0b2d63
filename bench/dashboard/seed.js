'use strict';
// Seeds a schema with N workflows (INSERT ... SELECT generate_series), for measuring the dashboard's API at scale.

/** The queues the seeded rows belong to, with the workflow each runs; `billing` is partitioned by tenant. */
const QUEUES = [
  { name: 'emails', workflow: 'Emails.send' },
  { name: 'reports', workflow: 'Reports.build' },
  { name: 'billing', workflow: 'Billing.charge', partitionConcurrency: 1 },
  { name: 'imports', workflow: 'Imports.run' },
  { name: 'webhooks', workflow: 'Webhooks.deliver' },
];

/**
 * Row i gets: a queue (i % 5); a status from a fixed pseudo-random draw (90% SUCCESS, 4% ERROR, 2% CANCELLED,
 * 0.5% MAX_RECOVERY_ATTEMPTS_EXCEEDED, 3% ENQUEUED, 0.5% PENDING); a creation time spread evenly over the last 7
 * days in i order; a deduplication ID `user-<i % 50000>` on 70% of finished rows (each reused about 14 times) and a
 * unique held one on active rows; a tenant partition key in `billing`; three steps on every 10th started row.
 */
async function seedWorkflows(pool, schema, count) {
  const table = `"${schema}".workflows`;
  const staging = `"${schema}".seed_rows`;
  await pool.query(`TRUNCATE "${schema}".workflow_queue, "${schema}".workflow_history, "${schema}".steps`);
  await pool.query(`DROP TABLE IF EXISTS ${staging}`);
  await pool.query(`CREATE UNLOGGED TABLE ${staging} (LIKE "${schema}".workflow_history INCLUDING DEFAULTS)`);
  await pool.query(
    `
    INSERT INTO ${staging} (workflow_id, queue_name, workflow_name, status, deduplication_id, active_deduplication_id,
                          inputs, output, error, executor_id, attempts, created_at, started_at, completed_at,
                          partition_key, updated_at)
    SELECT 'wf-' || i, q.name, q.workflow, s.status,
           CASE WHEN s.active THEN 'user-active-' || i WHEN i % 10 < 7 THEN 'user-' || (i % 50000) END,
           CASE WHEN s.active THEN 'user-active-' || i END,
           json_build_array('user-' || (i % 50000), json_build_object('n', i)),
           CASE WHEN s.status = 'SUCCESS' THEN json_build_object('ok', true, 'n', i) END,
           CASE WHEN s.status = 'ERROR' THEN json_build_object('name', 'Error', 'message', 'boom ' || i,
                                                               'stack', 'Error: boom\n    at work (tasks.js:1:1)') END,
           CASE WHEN s.status <> 'ENQUEUED' THEN 'bench-executor-' || (i % 4) END,
           (s.status <> 'ENQUEUED')::int,
           t.created_at,
           CASE WHEN s.status <> 'ENQUEUED' THEN t.created_at + interval '1 second' END,
           CASE WHEN NOT s.active THEN t.created_at + (1 + i % 60) * interval '1 second' END,
           CASE WHEN q.name = 'billing' THEN 'tenant-' || (i % 1000) END,
           t.created_at
    FROM generate_series(1, $1::int) AS i
    CROSS JOIN LATERAL (SELECT (ARRAY[${QUEUES.map((q) => `'${q.name}'`)}])[1 + i % 5] AS name,
                               (ARRAY[${QUEUES.map((q) => `'${q.workflow}'`)}])[1 + i % 5] AS workflow) AS q
    CROSS JOIN LATERAL (SELECT CASE WHEN d < 900 THEN 'SUCCESS' WHEN d < 940 THEN 'ERROR' WHEN d < 960 THEN 'CANCELLED'
                                    WHEN d < 965 THEN 'MAX_RECOVERY_ATTEMPTS_EXCEEDED' WHEN d < 995 THEN 'ENQUEUED'
                                    ELSE 'PENDING' END AS status, d >= 965 AS active
                        FROM (SELECT (i::bigint * 7919) % 1000 AS d) AS draw) AS s
    CROSS JOIN LATERAL (SELECT now() - interval '7 days' + (i::float8 / $1) * interval '7 days' AS created_at) AS t`,
    [count],
  );
  // 1.0 keeps what can still run (and dead letters) in workflow_queue, finished workflows in workflow_history.
  const live = `status IN ('ENQUEUED', 'PENDING', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')`;
  await pool.query(`INSERT INTO "${schema}".workflow_queue SELECT * FROM ${staging} WHERE ${live}`);
  await pool.query(`INSERT INTO "${schema}".workflow_history SELECT * FROM ${staging} WHERE NOT ${live}`);
  await pool.query(`DROP TABLE ${staging}`);
  await pool.query(`
    INSERT INTO "${schema}".steps (workflow_id, step_index, step_name, output, started_at, completed_at, queue_name,
                                   workflow_created_at)
    SELECT w.workflow_id, n, (ARRAY['load', 'render', 'deliver'])[n + 1], json_build_object('step', n),
           w.started_at + n * interval '200 milliseconds', w.started_at + (n + 1) * interval '200 milliseconds',
           w.queue_name, w.created_at
    FROM ${table} AS w CROSS JOIN generate_series(0, 2) AS n
    WHERE w.started_at IS NOT NULL AND substr(w.workflow_id, 4)::int % 10 = 0`);
  await touchRecent(pool, schema);
  await pool.query(`VACUUM ANALYZE "${schema}".workflow_queue`);
  await pool.query(`ANALYZE "${schema}".workflow_history`);
  await pool.query(`ANALYZE "${schema}".steps`);
}

/** Spreads the completion times of the newest 1,500 finished rows over the last 5 minutes (recent throughput). */
async function touchRecent(pool, schema) {
  await pool.query(`
    UPDATE "${schema}".workflow_history AS w SET completed_at = now() - (recent.n % 300) * interval '1 second'
    FROM (SELECT workflow_id, row_number() OVER (ORDER BY created_at DESC) AS n FROM "${schema}".workflow_history
          WHERE completed_at IS NOT NULL ORDER BY created_at DESC LIMIT 1500) AS recent
    WHERE w.workflow_id = recent.workflow_id`);
}

module.exports = { QUEUES, seedWorkflows, touchRecent };
