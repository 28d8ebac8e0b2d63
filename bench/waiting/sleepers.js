'use strict';
/*
 * What waiting workflows cost (issue 22): a queue drains BENCH_JOBS (default 20,000) no-op workflows (one worker
 * process, workerConcurrency 32) with and without BENCH_SLEEPERS (default 10,000) workflows of the same queue asleep
 * in `sleep(1 hour)` (WAITING: key kept, no slot); and what one sleep costs: BENCH_NAPS (default 1,000) workflows
 * that sleep 1.5 s (suspended, made due, claimed again) against as many no-op ones, in statements sent by the worker
 * process, commits (pg_stat_database) and rows; and how late they wake.
 *
 *   npm run build && node bench/waiting/sleepers.js    (BENCH_DATABASE_URL or DATABASE_URL for the server)
 */
const { DATABASE_URL, Pool, fromRoot, lib, median } = require('../observability/common');

const common = fromRoot('@nestjs/common');
const core = fromRoot('@nestjs/core');
const pg = fromRoot('pg');

const JOBS = Number(process.env.BENCH_JOBS ?? 20_000);
const SLEEPERS = Number(process.env.BENCH_SLEEPERS ?? 10_000);
const NAPS = Number(process.env.BENCH_NAPS ?? 1000);
const REPS = Number(process.env.BENCH_REPS ?? 3);
const SCHEMA = 'bench_sleepers';
const NAP_MS = 1500;

let statements = 0;
const query = pg.Client.prototype.query;
pg.Client.prototype.query = function (...args) {
  statements++;
  return query.apply(this, args);
};

function tasks() {
  class WaitTasks {
    async run() {}
    async nap(ms) {
      await lib.sleep(ms);
    }
  }
  common.Injectable()(WaitTasks);
  for (const name of ['run', 'nap']) {
    lib.Workflow()(WaitTasks.prototype, name, Object.getOwnPropertyDescriptor(WaitTasks.prototype, name));
  }
  return WaitTasks;
}

async function startApp(options) {
  class WaitBenchModule {}
  common.Module({
    imports: [
      lib.DedupQueueModule.forRoot({
        connection: { url: DATABASE_URL },
        schema: SCHEMA,
        queues: [{ name: 'bench', workerConcurrency: 32 }],
        ...options,
      }),
    ],
    providers: [tasks()],
  })(WaitBenchModule);
  const app = await core.NestFactory.createApplicationContext(WaitBenchModule, { logger: ['error', 'warn'] });
  return { app, queues: app.get(lib.QueueService) };
}

async function enqueue(queues, workflow, count, args) {
  for (let start = 0; start < count; start += 1000) {
    const items = Array.from({ length: Math.min(1000, count - start) }, () => ({ args }));
    await queues.enqueueMany('bench', workflow, items);
  }
}

async function until(pool, sql, done) {
  for (;;) {
    const { rows } = await pool.query(sql);
    if (done(rows[0].n)) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const count = (status, name) =>
  `SELECT count(*)::int AS n FROM ${SCHEMA}.workflows WHERE status = '${status}' AND workflow_name = 'WaitTasks.${name}'`;

async function commits(pool) {
  const { rows } = await pool.query(
    'SELECT (xact_commit + xact_rollback)::float8 AS n FROM pg_stat_database WHERE datname = current_database()',
  );
  return rows[0].n;
}

/** Drains JOBS no-op workflows with `sleepers` workflows asleep in the same queue; jobs/s. */
async function drain(pool, producer, sleepers) {
  await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  const setup = await startApp({ worker: false });
  if (sleepers > 0) {
    const worker = await startApp({});
    const started = performance.now();
    await enqueue(setup.queues, 'WaitTasks.nap', sleepers, [3_600_000]);
    await until(pool, count('WAITING', 'nap'), (n) => n >= sleepers);
    producer.suspendedPerSecond.push(sleepers / ((performance.now() - started) / 1000));
    await worker.app.close();
  }
  await setup.queues.pauseQueue('bench');
  await enqueue(setup.queues, 'WaitTasks.run', JOBS, []);
  await setup.app.close();
  await pool.query(`ANALYZE ${SCHEMA}.workflow_queue`);
  const worker = await startApp({});
  const started = performance.now();
  await worker.queues.resumeQueue('bench');
  await until(pool, count('SUCCESS', 'run'), (n) => n >= JOBS);
  const seconds = (performance.now() - started) / 1000;
  await worker.app.close();
  return JOBS / seconds;
}

/** Runs NAPS workflows of `name` to SUCCESS in one worker; statements and commits per workflow, and wake lateness. */
async function perWorkflow(pool, name, args) {
  await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  const setup = await startApp({ worker: false });
  await setup.queues.pauseQueue('bench');
  await enqueue(setup.queues, `WaitTasks.${name}`, NAPS, args);
  await setup.app.close();
  const worker = await startApp({});
  const before = { statements, commits: await commits(pool) };
  await worker.queues.resumeQueue('bench');
  await until(pool, count('SUCCESS', name), (n) => n >= NAPS);
  const after = { statements, commits: await commits(pool) };
  const { rows } = await pool.query(
    `SELECT count(*)::int AS steps FROM ${SCHEMA}.steps s JOIN ${SCHEMA}.workflows w USING (workflow_id)
     WHERE w.workflow_name = 'WaitTasks.${name}'`,
  );
  const lateness = (
    await pool.query(
      `SELECT extract(epoch FROM w.completed_at - (s.output #>> '{}')::timestamptz) * 1000 AS ms
       FROM ${SCHEMA}.steps s JOIN ${SCHEMA}.workflows w USING (workflow_id) WHERE s.step_name = 'sleep'`,
    )
  ).rows.map((row) => Number(row.ms));
  await worker.app.close();
  return {
    statements: (after.statements - before.statements) / NAPS,
    commits: (after.commits - before.commits - 2) / NAPS,
    stepRows: rows[0].steps / NAPS,
    lateness,
  };
}

function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))];
}

async function main() {
  const pool = new Pool({ connectionString: DATABASE_URL, max: 2 });
  pool.on('error', () => undefined);
  const results = { without: [], with: [], suspendedPerSecond: [] };
  try {
    for (let rep = 0; rep < REPS; rep++) {
      for (const sleepers of [0, SLEEPERS]) {
        const rate = await drain(pool, results, sleepers);
        results[sleepers ? 'with' : 'without'].push(rate);
        console.log(`rep ${rep + 1}, ${sleepers} asleep: ${rate.toFixed(0)} jobs/s`);
      }
    }
    const noop = await perWorkflow(pool, 'run', []);
    const nap = await perWorkflow(pool, 'nap', [NAP_MS]);
    console.log(
      `drain of ${JOBS}: ${median(results.without).toFixed(0)} jobs/s alone, ` +
        `${median(results.with).toFixed(0)} jobs/s with ${SLEEPERS} asleep in the queue ` +
        `(${((median(results.with) / median(results.without)) * 100).toFixed(0)}%); ` +
        `${SLEEPERS} suspended at ${median(results.suspendedPerSecond).toFixed(0)}/s`,
    );
    console.log(
      `per workflow (${NAPS}): no-op ${noop.statements.toFixed(2)} statements, ${noop.commits.toFixed(2)} commits; ` +
        `sleep(${NAP_MS}) ${nap.statements.toFixed(2)} statements, ${nap.commits.toFixed(2)} commits, ` +
        `${nap.stepRows.toFixed(2)} step rows; woke (completed) after the recorded time by p50 ` +
        `${percentile(nap.lateness, 50).toFixed(0)} ms, p99 ${percentile(nap.lateness, 99).toFixed(0)} ms`,
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
