'use strict';
/*
 * The cost of a Prometheus scrape of the queue's gauges on a big table: 1,000,000 finished workflows (SUCCESS,
 * ERROR, CANCELLED over 4 queues), 2,000 ENQUEUED and 32 PENDING. Times `registry.metrics()` (both gauges, one
 * database read) with the finished statuses recounted at every scrape (`finishedCountsMaxAgeMs: 0`) and with the
 * default (recounted once a minute, so a scrape reads only the active set), and prints the plans.
 *
 *   node bench/observability/gauges.js      (BENCH_DATABASE_URL or DATABASE_URL; schema bench_obs_gauges)
 */
const { Pool, fromRoot, median, startApp } = require('./common');

const SCHEMA = 'bench_obs_gauges';
const FINISHED = Number(process.env.BENCH_FINISHED_ROWS ?? 1_000_000);
const SCRAPES = 15;
const QUEUES = ['q0', 'q1', 'q2', 'q3'];

async function main() {
  const { DATABASE_URL } = require('./common');
  const pool = new Pool({ connectionString: DATABASE_URL, max: 2 });
  pool.on('error', () => undefined);
  await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  const { Registry } = fromRoot('prom-client');
  const seeder = await startApp({ schema: SCHEMA, queues: QUEUES.map((name) => ({ name })), worker: false });
  await seeder.app.close();

  let started = Date.now();
  await pool.query(
    `INSERT INTO ${SCHEMA}.workflow_history (workflow_id, queue_name, workflow_name, status, inputs, attempts, created_at,
                                      started_at, completed_at)
     SELECT 'f' || i, 'q' || (i % 4), 'BenchTasks.run',
            (ARRAY['SUCCESS', 'SUCCESS', 'SUCCESS', 'ERROR', 'CANCELLED'])[1 + i % 5], '[]', 1,
            now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour'
     FROM generate_series(1, $1) AS i`,
    [FINISHED],
  );
  await pool.query(
    `INSERT INTO ${SCHEMA}.workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, created_at)
     SELECT 'e' || i, 'q' || (i % 4), 'BenchTasks.run', 'ENQUEUED', '[]', now() - i * interval '1 second'
     FROM generate_series(1, 2000) AS i`,
  );
  await pool.query(
    `INSERT INTO ${SCHEMA}.workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, attempts, executor_id)
     SELECT 'p' || i, 'q' || (i % 4), 'BenchTasks.run', 'PENDING', '[]', 1, 'bench' FROM generate_series(1, 32) AS i`,
  );
  await pool.query(`VACUUM ANALYZE ${SCHEMA}.workflow_queue`);
  await pool.query(`ANALYZE ${SCHEMA}.workflow_history`);
  console.log(`seeded ${FINISHED} finished + 2032 active rows in ${Date.now() - started} ms`);

  const results = {};
  for (const [label, finishedCountsMaxAgeMs] of [
    ['recount finished at every scrape', 0],
    ['default (finished recounted every 60 s)', 60_000],
  ]) {
    const registry = new Registry();
    const { app } = await startApp({
      schema: SCHEMA,
      queues: QUEUES.map((name) => ({ name })),
      worker: false,
      metrics: { registry, finishedCountsMaxAgeMs, scrapeTimeoutMs: 10_000 },
    });
    const times = [];
    let text = '';
    for (let i = 0; i < SCRAPES; i++) {
      started = performance.now();
      text = await registry.metrics();
      times.push(performance.now() - started);
    }
    await app.close();
    const total = text
      .split('\n')
      .filter((line) => line.startsWith('dedup_queue_workflows{'))
      .reduce((sum, line) => sum + Number(line.split(' ')[1]), 0);
    results[label] = {
      firstMs: times[0],
      medianMs: median(times.slice(1)),
      maxMs: Math.max(...times.slice(1)),
      rowsCounted: total,
    };
  }
  console.table(results);
  for (const sql of [
    `SELECT queue_name, count(*) FROM ${SCHEMA}.workflows WHERE status = 'ENQUEUED' GROUP BY queue_name`,
    `SELECT queue_name, status, count(*) FROM ${SCHEMA}.workflows WHERE status NOT IN ('ENQUEUED', 'PENDING') GROUP BY 1, 2`,
  ]) {
    const plan = await pool.query(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) ${sql}`);
    console.log(`\n${sql}\n${plan.rows.map((row) => `  ${row['QUERY PLAN']}`).join('\n')}`);
  }
  if (!process.env.BENCH_KEEP) await pool.query(`DROP SCHEMA ${SCHEMA} CASCADE`);
  await pool.end();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
