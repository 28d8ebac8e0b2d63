'use strict';
// W3 latency: a worker process (concurrency 32) is running and idle; a producer process enqueues `jobs` jobs at
// `ratePerSecond`, open loop. Latency = the worker's body start minus the producer's clock just before the enqueue
// call (both CLOCK_MONOTONIC). Reports p50/p95/p99 in milliseconds.
const { Child, runRole } = require('../lib/proc');
const { percentile, sleep } = require('../lib/stats');

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
  try {
    await worker.waitFor('ready', 60_000);
    await sleep(500);
    const latenciesPromise = worker.waitFor('latencies', 60_000 + (jobs / ratePerSecond) * 1000);
    latenciesPromise.catch(() => {});
    const produced = await runRole(
      { module: system.module, ctx, role: 'latency-producer', args: { jobs, ratePerSecond } },
      120_000,
    );
    if (produced.errors) problems.push(`${produced.errors} enqueues failed`);
    const { values } = await latenciesPromise;
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
