'use strict';
// W2 drain: `jobs` pre-enqueued no-op jobs, one worker process with concurrency 32. Throughput = jobs / (time from
// the first body starting to the moment the database shows none left to do). The worker's peak RSS (VmHWM) is W5's
// first figure. Also used by W4 (same drain on a table that already holds 1,000,000 finished jobs) and W5 (backlog).
const { Child } = require('../lib/proc');
const { query } = require('../lib/pg');
const { nowNs, sleep } = require('../lib/stats');
const { StoreCpu, Transactions, cpuSeconds } = require('../lib/usage');

async function prefill(system, ctx, n, runRoleTimeoutMs = 600_000) {
  if (system.adapter.prefill) return system.adapter.prefill(ctx, n);
  // No bulk path: the system's own enqueue API, 16 producers (not measured).
  const { runRole } = require('../lib/proc');
  const result = await runRole(
    { module: system.module, ctx, role: 'enqueue-many', args: { n, producers: 16, keyPrefix: `p${Date.now()}-` } },
    runRoleTimeoutMs,
  );
  if (result.accepted !== n) throw new Error(`prefill accepted ${result.accepted} of ${n}`);
}

/**
 * Options: `analyze` (default true) runs ANALYZE after the prefill, as autovacuum gives a running system; false
 * leaves whatever statistics the table's earlier use left ("stale"). `workers` worker processes (default 1).
 * Besides jobs/s it reports CPU per job (the worker processes and the store, from /proc), transactions per job
 * (pg_stat_database) and start-up: worker boot end (`ready`) to its first claim and to the first job's start.
 */
async function drain(
  system,
  ctx,
  config,
  { jobs, reset = true, timeoutMs = config.drainTimeoutMs, sampleRss = false, analyze = true, workers = 1 } = {},
) {
  if (reset) await system.adapter.reset(ctx);
  const completedBefore = system.adapter.completed ? await system.adapter.completed(ctx) : null;
  await prefill(system, ctx, jobs);
  if (analyze && ctx.databaseUrl) await query(ctx.databaseUrl, 'ANALYZE');
  const pendingBefore = await system.adapter.pending(ctx);
  if (pendingBefore !== jobs) throw new Error(`prefill left ${pendingBefore} pending jobs, expected ${jobs}`);

  const transactions = ctx.databaseUrl
    ? new Transactions({ adminUrl: ctx.adminUrl, databaseUrl: ctx.databaseUrl })
    : null;
  if (transactions) await transactions.start();
  const tFork = nowNs();
  const children = Array.from(
    { length: workers },
    () =>
      new Child({
        module: system.module,
        ctx,
        role: 'worker',
        args: { mode: 'drain', expect: jobs, concurrency: config.w2.concurrency },
      }),
  );
  const child = children[0];
  const samples = [];
  let sampler;
  if (sampleRss) {
    sampler = setInterval(() => samples.push(child.memory().rssMiB), 200);
  }
  const problems = [];
  let perSecond = null;
  let elapsedMs = null;
  let timedOut = false;
  let cpu = null;
  let startup = null;
  let walBytesPerJob = null;
  try {
    const first = await Promise.any(children.map((c) => c.waitFor('first', 60_000)));
    const store = new StoreCpu({
      adminUrl: ctx.adminUrl,
      databaseUrl: ctx.databaseUrl,
      extraPids: ctx.storePids || [],
    });
    const workerCpu0 = children.map((c) => cpuSeconds(c.pid));
    await store.start();
    const walBefore = ctx.databaseUrl ? await walLsn(ctx.adminUrl) : null;
    const tFirst = BigInt(first.t);
    let done = null;
    try {
      done = workers === 1 ? await child.waitFor('bodies-done', timeoutMs) : true;
    } catch {
      timedOut = true;
      problems.push(`not drained within ${Math.round(timeoutMs / 1000)} s`);
    }
    if (done) {
      // The last body ran (one worker; with several, from the first start on); wait until the database says
      // nothing is left to do.
      let tEnd;
      const deadline = Date.now() + (workers === 1 ? 30_000 : timeoutMs);
      for (;;) {
        const left = await system.adapter.pending(ctx);
        if (left === 0) {
          tEnd = nowNs();
          break;
        }
        if (Date.now() > deadline) {
          problems.push(
            `${left} jobs still not recorded complete ${workers === 1 ? '30 s after their bodies ran' : 'in time'}`,
          );
          break;
        }
        await sleep(workers === 1 ? 2 : 20);
      }
      if (tEnd) {
        elapsedMs = Number(tEnd - tFirst) / 1e6;
        perSecond = jobs / (elapsedMs / 1000);
        const workerSeconds = children.reduce(
          (sum, c, i) => sum + ((cpuSeconds(c.pid) ?? NaN) - (workerCpu0[i] ?? NaN)),
          0,
        );
        const storeSeconds = await store.stop();
        cpu = { workerUsPerJob: (workerSeconds * 1e6) / jobs, storeUsPerJob: (storeSeconds * 1e6) / jobs };
        if (walBefore !== null) walBytesPerJob = Number((await walLsn(ctx.adminUrl)) - walBefore) / jobs;
      }
    }
    const ready = child.messages.find((m) => m.type === 'ready');
    if (ready && children.length === 1) {
      const tReady = BigInt(ready.tReady);
      startup = {
        forkToReadyMs: Number(tReady - tFork) / 1e6,
        readyToFirstJobMs: Number(tFirst - tReady) / 1e6,
        readyToFirstClaimMs: null,
      };
    }
  } finally {
    if (sampler) clearInterval(sampler);
  }
  const memory = child.memory();
  const progress = timedOut ? jobs - (await system.adapter.pending(ctx)) : jobs;
  await Promise.all(children.map((c) => c.stop()));
  const stopped = children.map((c) => c.messages.find((m) => m.type === 'stopped'));
  if (startup && stopped[0] && stopped[0].tFirstClaim) {
    startup.readyToFirstClaimMs =
      Number(BigInt(stopped[0].tFirstClaim) - BigInt(child.messages.find((m) => m.type === 'ready').tReady)) / 1e6;
  }
  if (!timedOut) {
    const ran = stopped.every(Boolean) ? stopped.reduce((sum, m) => sum + m.count, 0) : null;
    if (ran !== null && ran !== jobs) problems.push(`${ran} bodies ran for ${jobs} jobs`);
    if (completedBefore !== null) {
      const completed = (await system.adapter.completed(ctx)) - completedBefore;
      if (completed !== jobs) problems.push(`${completed} jobs recorded complete, expected ${jobs}`);
    }
  }
  const xacts = transactions && !timedOut ? await transactions.stop() : null;
  return {
    perSecond,
    elapsedMs,
    progress,
    peakRssMiB: memory.peakMiB,
    rssSamplesMiB: samples,
    cpu,
    startup,
    // WAL written by the whole server over the drain (pg_current_wal_lsn), per job: other clients of a shared
    // server add theirs.
    walBytesPerJob,
    commitsPerJob: xacts ? xacts.transactions / jobs : null,
    // Every statement the worker processes sent, boot to shutdown (where the adapter counts them).
    statementsPerJob: stopped.every((m) => m && typeof m.statements === 'number')
      ? stopped.reduce((sum, m) => sum + m.statements, 0) / jobs
      : null,
    analyzed: analyze,
    workers,
    ok: problems.length === 0,
    problems,
  };
}

/** The server's current WAL position, in bytes. */
async function walLsn(adminUrl) {
  const [row] = await query(adminUrl, "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::text AS lsn");
  return BigInt(row.lsn.split('.')[0]);
}

module.exports = { drain, prefill };
