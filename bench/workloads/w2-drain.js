'use strict';
// W2 drain: `jobs` pre-enqueued no-op jobs, one worker process with concurrency 32. Throughput = jobs / (time from
// the first body starting to the moment the database shows none left to do). The worker's peak RSS (VmHWM) is W5's
// first figure. Also used by W4 (same drain on a table that already holds 1,000,000 finished jobs) and W5 (backlog).
const { Child } = require('../lib/proc');
const { nowNs, sleep } = require('../lib/stats');

async function prefill(system, ctx, n, runRoleTimeoutMs = 600_000) {
  if (system.adapter.prefill) return system.adapter.prefill(ctx, n);
  // No bulk path: the system's own enqueue API, 16 producers (not measured).
  const { runRole } = require('../lib/proc');
  const result = await runRole({ module: system.module, ctx, role: 'enqueue-many', args: { n, producers: 16, keyPrefix: `p${Date.now()}-` } }, runRoleTimeoutMs);
  if (result.accepted !== n) throw new Error(`prefill accepted ${result.accepted} of ${n}`);
}

async function drain(system, ctx, config, { jobs, reset = true, timeoutMs = config.drainTimeoutMs, sampleRss = false } = {}) {
  if (reset) await system.adapter.reset(ctx);
  const completedBefore = system.adapter.completed ? await system.adapter.completed(ctx) : null;
  await prefill(system, ctx, jobs);
  const pendingBefore = await system.adapter.pending(ctx);
  if (pendingBefore !== jobs) throw new Error(`prefill left ${pendingBefore} pending jobs, expected ${jobs}`);

  const child = new Child({ module: system.module, ctx, role: 'worker', args: { mode: 'drain', expect: jobs, concurrency: config.w2.concurrency } });
  const samples = [];
  let sampler;
  if (sampleRss) {
    sampler = setInterval(() => samples.push(child.memory().rssMiB), 200);
  }
  const problems = [];
  let perSecond = null;
  let elapsedMs = null;
  let timedOut = false;
  try {
    const first = await child.waitFor('first', 60_000);
    const tFirst = BigInt(first.t);
    let done = null;
    try {
      done = await child.waitFor('bodies-done', timeoutMs);
    } catch (error) {
      timedOut = true;
      problems.push(`not drained within ${Math.round(timeoutMs / 1000)} s`);
    }
    if (done) {
      // The last body ran; now wait until the database says nothing is left to do.
      let tEnd;
      const deadline = Date.now() + 30_000;
      for (;;) {
        const left = await system.adapter.pending(ctx);
        if (left === 0) {
          tEnd = nowNs();
          break;
        }
        if (Date.now() > deadline) {
          problems.push(`${left} jobs still not recorded complete 30 s after their bodies ran`);
          break;
        }
        await sleep(2);
      }
      if (tEnd) {
        elapsedMs = Number(tEnd - tFirst) / 1e6;
        perSecond = jobs / (elapsedMs / 1000);
      }
    }
  } finally {
    if (sampler) clearInterval(sampler);
  }
  const memory = child.memory();
  const progress = timedOut ? jobs - (await system.adapter.pending(ctx)) : jobs;
  await child.stop();
  const stopped = child.messages.find((m) => m.type === 'stopped');
  if (!timedOut) {
    if (stopped && stopped.count !== jobs) problems.push(`${stopped.count} bodies ran for ${jobs} jobs`);
    if (completedBefore !== null) {
      const completed = (await system.adapter.completed(ctx)) - completedBefore;
      if (completed !== jobs) problems.push(`${completed} jobs recorded complete, expected ${jobs}`);
    }
  }
  return {
    perSecond,
    elapsedMs,
    progress,
    peakRssMiB: memory.peakMiB,
    rssSamplesMiB: samples,
    ok: problems.length === 0,
    problems,
  };
}

module.exports = { drain, prefill };
