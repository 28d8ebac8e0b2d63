'use strict';
/*
 * W2 (drain) behind PgBouncer next to direct: BENCH_JOBS (default 20,000) no-op workflows enqueued into a paused
 * queue with enqueueMany, then one worker (workerConcurrency 32, the module's defaults otherwise) drains them; jobs/s
 * from resuming the queue until the database shows all SUCCESS. "direct" connects to the server; "pgbouncer" goes
 * through a PgBouncer of its own in pool_mode = transaction with `pooler: 'transaction'` and `listen: { url }` on a
 * direct connection. Interleaved, medians of BENCH_REPS (default 3).
 *
 *   node bench/pgbouncer-drain.js    (needs /usr/sbin/pgbouncer; BENCH_DATABASE_URL or DATABASE_URL for the server)
 */
const { DATABASE_URL, Pool, median, startApp } = require('./observability/common');
const { startPgBouncer } = require('./lib/pgbouncer');

const JOBS = Number(process.env.BENCH_JOBS ?? 20_000);
const REPS = Number(process.env.BENCH_REPS ?? 3);
const SCHEMA = 'bench_pgbouncer_drain';

async function drainOnce(pool, options) {
  await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  const config = { schema: SCHEMA, queues: [{ name: 'bench', workerConcurrency: 32 }], ...options };
  const producer = await startApp({ ...config, worker: false });
  await producer.queues.pauseQueue('bench');
  for (let start = 0; start < JOBS; start += 1000) {
    const items = Array.from({ length: Math.min(1000, JOBS - start) }, (_, i) => ({ args: [start + i] }));
    await producer.queues.enqueueMany('bench', 'BenchTasks.run', items);
  }
  await producer.app.close();
  await pool.query(`ANALYZE ${SCHEMA}.workflows`);
  const worker = await startApp(config);
  const started = performance.now();
  await worker.queues.resumeQueue('bench');
  for (;;) {
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${SCHEMA}.workflows WHERE status = 'SUCCESS'`);
    if (rows[0].n >= JOBS) break;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const seconds = (performance.now() - started) / 1000;
  await worker.app.close();
  return JOBS / seconds;
}

async function main() {
  const bouncer = await startPgBouncer(DATABASE_URL);
  const pool = new Pool({ connectionString: DATABASE_URL, max: 2 });
  pool.on('error', () => undefined);
  const modes = {
    direct: { connection: { url: DATABASE_URL } },
    pgbouncer: {
      connection: { url: bouncer.url(new URL(DATABASE_URL).pathname.slice(1) || 'postgres') },
      pooler: 'transaction',
      listen: { url: DATABASE_URL },
    },
  };
  const results = { direct: [], pgbouncer: [] };
  try {
    for (let rep = 0; rep < REPS; rep++) {
      for (const [mode, options] of Object.entries(modes)) {
        const jobsPerSecond = await drainOnce(pool, options);
        results[mode].push(jobsPerSecond);
        console.log(`rep ${rep + 1} ${mode}: ${jobsPerSecond.toFixed(0)} jobs/s`);
      }
    }
  } finally {
    await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`).catch(() => undefined);
    await pool.end();
    bouncer.stop();
  }
  const direct = median(results.direct);
  const pooled = median(results.pgbouncer);
  console.log(
    `W2 drain of ${JOBS}: direct ${direct.toFixed(0)} jobs/s, through PgBouncer ${pooled.toFixed(0)} jobs/s (${((pooled / direct) * 100).toFixed(0)}%)`,
  );
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
