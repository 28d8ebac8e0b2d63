'use strict';
/*
 * Why waiting workflows cost a claim nothing, in buffers rather than seconds (the machine is shared): the pages a
 * claim reads (EXPLAIN (ANALYZE, BUFFERS) of its candidate scan) in a queue of 1,000 ready workflows, alone, next to
 * BENCH_SLEEPERS (default 10,000) older WAITING workflows, and next to as many stored the other way a wait could be
 * (ENQUEUED with a start time ahead, as DELAYED rows are), which the ready index holds and the claim walks past.
 *
 *   npm run build && node bench/waiting/claim-buffers.js
 */
const { DATABASE_URL, Pool, startApp } = require('../observability/common');

const SLEEPERS = Number(process.env.BENCH_SLEEPERS ?? 10_000);
const SCHEMA = 'bench_claim_buffers';

const CANDIDATES = `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
  SELECT workflow_id FROM ${SCHEMA}.workflow_queue
  WHERE queue_name = 'bench' AND status = 'ENQUEUED' AND (not_before IS NULL OR not_before <= now())
    AND workflow_name = ANY(ARRAY['BenchTasks.run'])
  ORDER BY priority, seq LIMIT 32 FOR UPDATE SKIP LOCKED`;

async function buffers(pool) {
  const runs = [];
  for (let i = 0; i < 5; i++) {
    const { rows } = await pool.query(CANDIDATES);
    const plan = rows[0]['QUERY PLAN'][0];
    runs.push({ pages: plan.Plan['Shared Hit Blocks'] + plan.Plan['Shared Read Blocks'], ms: plan['Execution Time'] });
  }
  runs.sort((a, b) => a.ms - b.ms);
  return runs[2];
}

async function main() {
  const pool = new Pool({ connectionString: DATABASE_URL, max: 2 });
  pool.on('error', () => undefined);
  await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  const setup = await startApp({ schema: SCHEMA, worker: false, queues: [{ name: 'bench' }] });
  await setup.app.close();
  const insert = (count, status, notBefore) =>
    pool.query(
      `INSERT INTO ${SCHEMA}.workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, attempts, not_before)
       SELECT gen_random_uuid()::text, 'bench', 'BenchTasks.run', $2, '[]', $3, $4::timestamptz
       FROM generate_series(1, $1)`,
      [count, status, status === 'ENQUEUED' && notBefore === null ? 0 : 1, notBefore],
    );
  try {
    await insert(1000, 'ENQUEUED', null);
    await pool.query(`VACUUM ANALYZE ${SCHEMA}.workflow_queue`);
    const alone = await buffers(pool);
    await pool.query(`DELETE FROM ${SCHEMA}.workflow_queue`);
    await insert(SLEEPERS, 'WAITING', new Date(Date.now() + 3_600_000).toISOString());
    await insert(1000, 'ENQUEUED', null);
    await pool.query(`VACUUM ANALYZE ${SCHEMA}.workflow_queue`);
    const waiting = await buffers(pool);
    await pool.query(`UPDATE ${SCHEMA}.workflow_queue SET status = 'ENQUEUED' WHERE status = 'WAITING'`);
    await pool.query(`VACUUM ANALYZE ${SCHEMA}.workflow_queue`);
    const delayed = await buffers(pool);
    const show = ({ pages, ms }) => `${pages} pages, ${ms.toFixed(2)} ms`;
    console.log(
      `claim candidates (32 of 1,000 ready): alone ${show(alone)}; with ${SLEEPERS} WAITING ${show(waiting)}; ` +
        `with ${SLEEPERS} stored as DELAYED ${show(delayed)}`,
    );
  } finally {
    await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`).catch(() => undefined);
    await pool.end();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
