'use strict';
// W3 latency: a worker process (concurrency 32) is running and idle; a producer process enqueues `jobs` jobs at
// `ratePerSecond`, open loop. Latency = the worker's body start minus the producer's clock just before the enqueue
// call (both CLOCK_MONOTONIC). Reports p50/p95/p99 in milliseconds.
// When the latencies do not come, the failure says why: the producer's errors, which jobs the worker never ran (or
// ran twice), the rows' statuses and executors in the database, the server's sessions and the worker's stderr.
const { Child, runRole } = require('../lib/proc');
const { percentile, sleep } = require('../lib/stats');
const { query } = require('../lib/pg');

module.exports = async function latency(system, ctx, config) {
  await system.adapter.reset(ctx);
  const { jobs, ratePerSecond, concurrency } = config.w3;
  const worker = new Child({
    module: system.module,
    ctx,
    role: 'worker',
    args: { mode: 'latency', expect: jobs, concurrency },
  });
  const problems = [];
  let produced;
  try {
    await worker.waitFor('ready', 60_000);
    await sleep(500);
    const latenciesPromise = worker.waitFor('latencies', 60_000 + (jobs / ratePerSecond) * 1000);
    latenciesPromise.catch(() => {});
    produced = await runRole(
      { module: system.module, ctx, role: 'latency-producer', args: { jobs, ratePerSecond } },
      120_000,
    );
    if (produced.errors) problems.push(`${produced.errors} enqueues failed (${produced.firstError})`);
    let values;
    try {
      ({ values } = await latenciesPromise);
    } catch (error) {
      throw new Error(`${error.message}; ${await explain(system, ctx, worker, produced)}`, { cause: error });
    }
    return {
      p50: percentile(values, 50),
      p95: percentile(values, 95),
      p99: percentile(values, 99),
      max: Math.max(...values),
      // The enqueue call alone, as the producer saw it (median): a lone enqueue's cost next to raw SQL's.
      callP50: produced.callP50Ms,
      achievedRate: produced.achievedRate,
      maxLagMs: produced.maxLagMs,
      ok: problems.length === 0,
      problems,
    };
  } finally {
    await worker.stop();
  }
};

/** What a W3 run that got no latencies left behind, in one line per part. */
async function explain(system, ctx, worker, produced) {
  const parts = [];
  parts.push(
    `producer: ${produced ? `${produced.jobs} sent, ${produced.errors} failed${produced.firstError ? ` (${produced.firstError})` : ''}` : 'no result'}`,
  );
  const rows = await statuses(system, ctx).catch((error) => `(${error.message})`);
  parts.push(`rows: ${rows}`);
  const sessions = await query(
    ctx.databaseUrl,
    `SELECT application_name, state, wait_event_type, wait_event, left(query, 80) AS query,
            round(extract(epoch FROM now() - state_change))::int AS for_s
     FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
  ).catch(() => []);
  parts.push(`sessions: ${JSON.stringify(sessions)}`);
  worker.send({ type: 'stop' });
  const stopped = await worker.waitFor('stopped', 15_000).catch((error) => ({ error: error.message }));
  parts.push(`worker: ${JSON.stringify(stopped.error ? stopped : { measured: stopped.measured, runs: stopped.runs })}`);
  if (worker.stderr) parts.push(`worker stderr: ${worker.stderr.trim().split('\n').slice(-30).join(' | ')}`);
  return parts.join('\n  ');
}

/** Rows of the measured queue by status and executor (nest-dedup-queue's view; other systems: their counts). */
async function statuses(system, ctx) {
  if (system.module !== 'nest-dedup-queue')
    return `pending ${await system.adapter.pending(ctx)}, completed ${await system.adapter.completed(ctx)}`;
  const rows = await query(
    ctx.databaseUrl,
    `SELECT status, executor_id, count(*)::int AS n, count(*) FILTER (WHERE inputs::text LIKE '%"t0"%')::int AS measured
     FROM dedup_queue.workflows WHERE queue_name = $1 GROUP BY 1, 2 ORDER BY 1, 2`,
    [ctx.queueName],
  );
  return JSON.stringify(rows);
}
