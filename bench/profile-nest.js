#!/usr/bin/env node
'use strict';
/*
 * Where nest-dedup-queue spends its time: `node bench/profile-nest.js [w1|w2|w3|w4|all] [--allocations]`.
 *
 * Runs the workload in this one process against bench_profile_nest (dropped and recreated) and prints:
 *  - every SQL statement the library sent, grouped by its first words: count, per call/job, rows, errors, mean time,
 *    and how many connections were opened (pg's Client.prototype.query/connect, wrapped);
 *  - a CPU profile of the process (node:inspector), by package and by function, and (W1, W2) the library's functions by
 *    total time; with --allocations, W2 once more under the sampling heap profiler (bytes allocated per job by
 *    function: what the garbage collector's share of the profile reclaims);
 *  - W3: the enqueue-to-start timeline per job (insert round trip, NOTIFY delivery, claim, dispatch to the body).
 * A diagnostic for the library's developers, not part of `npm run bench`. Producer and worker share this process, so
 * absolute times differ from the benchmark's; the counts do not.
 */
const inspector = require('node:inspector');
const path = require('node:path');
const config = require('./lib/config');
const { recreateDatabase, query, closePools } = require('./lib/pg');
const { shuffle, nowNs, sleep, percentile, median } = require('./lib/stats');
const nest = require('./systems/nest-dedup-queue');

// ---- statement accounting on the pg module the library uses ----
const pg = require(require.resolve('pg', { paths: [config.LIBRARY_DIST] }));
const statements = new Map();
let connections = 0;
const timeline = { notifications: [], claims: [] };

const keys = new Map();
/** The statement's key, once per text: the harness's own work (and allocations) stay out of the library's share. */
function keyOf(text) {
  let key = keys.get(text);
  if (key === undefined) keys.set(text, (key = computeKeyOf(text)));
  return key;
}

function computeKeyOf(text) {
  const flat = String(text || '')
    .replace(/\s+/g, ' ')
    .trim();
  const ctes = [...flat.matchAll(/(\w+) AS \(\s*(\w+)/g)]
    .map((m) => `${m[1]}:${m[2]}`)
    .slice(0, 4)
    .join(',');
  const main = flat.replace(/^WITH( RECURSIVE)? .*?\)\s*(SELECT|UPDATE|INSERT|DELETE)/, '$2').slice(0, 48);
  return ctes ? `WITH[${ctes}] ${main}` : flat.slice(0, 70);
}

const originalQuery = pg.Client.prototype.query;
pg.Client.prototype.query = function query(configOrText, values, callback) {
  const text = typeof configOrText === 'string' ? configOrText : configOrText && configOrText.text;
  const key = keyOf(text);
  const start = nowNs();
  const done = (error, result) => {
    const end = nowNs();
    let s = statements.get(key);
    if (!s) statements.set(key, (s = { count: 0, ns: 0n, rows: 0, errors: 0 }));
    s.count++;
    s.ns += end - start;
    if (error) s.errors++;
    else if (result && typeof result.rowCount === 'number') s.rows += result.rowCount;
    if (!error && /status = 'PENDING', executor_id/.test(text || '')) claimed(text, start, end, result);
  };
  if (typeof values === 'function') return originalQuery.call(this, configOrText, (e, r) => (done(e, r), values(e, r)));
  if (typeof callback === 'function')
    return originalQuery.call(this, configOrText, values, (e, r) => (done(e, r), callback(e, r)));
  const result = originalQuery.call(this, configOrText, values);
  if (result && typeof result.then === 'function')
    result.then(
      (r) => done(null, r),
      (e) => done(e),
    );
  return result;
};
const originalConnect = pg.Client.prototype.connect;
pg.Client.prototype.connect = function connect(...args) {
  connections++;
  return originalConnect.apply(this, args);
};
const originalEmit = pg.Client.prototype.emit;
pg.Client.prototype.emit = function emit(event, ...args) {
  if (event === 'notification') timeline.notifications.push(nowNs());
  return originalEmit.call(this, event, ...args);
};

/**
 * W3's per-job timeline: the claim statement that took job `i` (its payload, in the rows as sent back: a claim's
 * `inputs`, or the claimed rows' JSON of an outcome write that carried the claim), with when it was sent and answered.
 */
function claimed(text, start, end, result) {
  if (!result || !result.rowCount) return;
  const withOutcomes = /archived AS|ended AS/.test(text);
  for (const match of JSON.stringify(result.rows).matchAll(/\\*"i\\*":(\d+)/g))
    timeline.claims.push({ i: Number(match[1]), start, end, withOutcomes });
}

function resetCounters() {
  statements.clear();
  connections = 0;
  timeline.notifications.length = 0;
  timeline.claims.length = 0;
}

function printStatements(per, unit) {
  const rows = [...statements.entries()].sort((a, b) => Number(b[1].ns - a[1].ns));
  console.log(`  connections opened: ${connections}`);
  console.log(
    `  ${'statement'.padEnd(74)} ${'count'.padStart(7)} ${`per ${unit}`.padStart(9)} ${'rows/stmt'.padStart(9)} ${'errors'.padStart(7)} ${'mean ms'.padStart(8)}`,
  );
  for (const [key, s] of rows) {
    console.log(
      `  ${key.slice(0, 74).padEnd(74)} ${String(s.count).padStart(7)} ${(s.count / per).toFixed(3).padStart(9)} ` +
        `${(s.rows / s.count).toFixed(1).padStart(9)} ${String(s.errors).padStart(7)} ${(Number(s.ns) / 1e6 / s.count).toFixed(2).padStart(8)}`,
    );
  }
  const total = rows.reduce((n, [, s]) => n + s.count, 0);
  console.log(`  round trips per ${unit}: ${(total / per).toFixed(3)}`);
}

// ---- CPU profile through the inspector ----
const session = new inspector.Session();
session.connect();
const post = (method, params) =>
  new Promise((resolve, reject) => session.post(method, params, (e, r) => (e ? reject(e) : resolve(r))));
async function profile(work) {
  await post('Profiler.enable');
  await post('Profiler.setSamplingInterval', { interval: 200 });
  await post('Profiler.start');
  const result = await work();
  const { profile: cpu } = await post('Profiler.stop');
  return { result, cpu };
}
/** Where a frame is from: the library, a package, node core, the harness. */
function packageOf(frame) {
  const url = frame.url || '';
  if (url.includes('/packages/nest-dedup-queue/')) return 'nest-dedup-queue';
  if (url.includes('node_modules/')) {
    const rest = url.split('node_modules/').pop().split('/');
    return rest[0].startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0];
  }
  if (url.startsWith('node:')) return 'node core';
  if (url.includes('/bench/')) return 'bench harness';
  return frame.functionName ? `(${frame.functionName})` : '(native)';
}

function frameName(frame) {
  const url = (frame.url || '')
    .replace(/^.*node_modules\//, '')
    .replace(/^.*\/packages\//, '')
    .replace('file://', '');
  return `${frame.functionName || '(anonymous)'} ${url}:${frame.lineNumber + 1}`;
}

/**
 * The library's functions by total time (their own and their callees', counted once per sample), as a share of the
 * busy (non-idle) time: which of its steps a job's CPU goes to.
 */
function printInclusive(cpu) {
  const byId = new Map(cpu.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const node of cpu.nodes) for (const child of node.children || []) parent.set(child, node.id);
  const total = new Map();
  let busy = 0;
  for (let i = 0; i < cpu.samples.length; i++) {
    const leaf = byId.get(cpu.samples[i]);
    const us = cpu.timeDeltas[i] || 0;
    if (leaf.callFrame.functionName === '(idle)') continue;
    busy += us;
    const seen = new Set();
    for (let id = cpu.samples[i]; id !== undefined; id = parent.get(id)) {
      const frame = byId.get(id).callFrame;
      if (packageOf(frame) !== 'nest-dedup-queue') continue;
      const name = frameName(frame);
      if (seen.has(name)) continue;
      seen.add(name);
      total.set(name, (total.get(name) || 0) + us);
    }
  }
  console.log(
    `  the library's functions by total time (with their callees), share of ${(busy / 1000).toFixed(0)} ms busy:`,
  );
  [...total]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 25)
    .forEach(([name, us]) => console.log(`  ${((100 * us) / busy).toFixed(1).padStart(5)}%  ${name}`));
}

/** Allocation sampling (the heap profiler): which functions allocate what the garbage collector then reclaims. */
async function allocations(work) {
  await post('HeapProfiler.enable');
  await post('HeapProfiler.startSampling', {
    samplingInterval: 4096,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  const result = await work();
  const { profile: heap } = await post('HeapProfiler.stopSampling');
  const bySite = new Map();
  let totalBytes = 0;
  const walk = (node, stack) => {
    const frame = node.callFrame;
    const here = frameName(frame);
    const library = packageOf(frame) === 'nest-dedup-queue' ? here : stack;
    const bytes = node.selfSize;
    totalBytes += bytes;
    if (bytes > 0) {
      const key = `${here}${library && library !== here ? `  <- ${library}` : ''}`;
      bySite.set(key, (bySite.get(key) || 0) + bytes);
    }
    for (const child of node.children) walk(child, library);
  };
  walk(heap.head, undefined);
  return { result, bySite, totalBytes };
}

function printProfile(cpu) {
  const byId = new Map(cpu.nodes.map((n) => [n.id, n]));
  const self = new Map();
  for (let i = 0; i < cpu.samples.length; i++)
    self.set(cpu.samples[i], (self.get(cpu.samples[i]) || 0) + (cpu.timeDeltas[i] || 0));
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const byPackage = new Map();
  const byFunction = new Map();
  for (const [id, us] of self) {
    const frame = byId.get(id).callFrame;
    const url = frame.url || '';
    let pkg;
    if (url.includes('/packages/nest-dedup-queue/')) pkg = 'nest-dedup-queue';
    else if (url.includes('node_modules/')) {
      const rest = url.split('node_modules/').pop().split('/');
      pkg = rest[0].startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0];
    } else if (url.startsWith('node:')) pkg = 'node core';
    else if (url.includes('/bench/')) pkg = 'bench harness';
    else pkg = frame.functionName ? `(${frame.functionName})` : '(native)';
    byPackage.set(pkg, (byPackage.get(pkg) || 0) + us);
    const fn = `${frame.functionName || '(anonymous)'} ${url
      .replace(/^.*node_modules\//, '')
      .replace(/^.*\/packages\//, '')
      .replace('file://', '')}:${frame.lineNumber + 1}`;
    byFunction.set(fn, (byFunction.get(fn) || 0) + us);
  }
  const show = (map, n) =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .forEach(([name, us]) => console.log(`  ${((100 * us) / total).toFixed(1).padStart(5)}%  ${name}`));
  console.log(`  CPU profile, ${(total / 1000).toFixed(0)} ms sampled, by package:`);
  show(byPackage, 12);
  console.log('  by function (self time):');
  show(byFunction, 15);
}

// ---- the workloads ----
async function w1(ctx) {
  const { calls, keys, producers } = config.w1;
  await nest.reset(ctx);
  const producer = await nest.producer(ctx, { mode: 'storm' });
  const sequence = shuffle(Array.from({ length: calls }, (_, i) => i % keys));
  resetCounters();
  let next = 0;
  let accepted = 0;
  const { result: elapsed, cpu } = await profile(async () => {
    const t0 = nowNs();
    await Promise.all(
      Array.from({ length: producers }, async () => {
        while (next < sequence.length) {
          const i = next++;
          if (await producer.enqueue(`key-${sequence[i]}`, { i })) accepted++;
        }
      }),
    );
    return Number(nowNs() - t0) / 1e9;
  });
  console.log(`\nW1: ${calls} calls, ${accepted} accepted, ${Math.round(calls / elapsed)} calls/s (in-process)`);
  printStatements(calls, 'call');
  printProfile(cpu);
  printInclusive(cpu);
  await producer.close();
}

async function w2(ctx, { seeded = false } = {}) {
  const jobs = config.w2.jobs;
  if (!seeded) await nest.reset(ctx);
  await nest.prefill(ctx, jobs);
  resetCounters();
  let count = 0;
  let resolveDone;
  const allRan = new Promise((resolve) => (resolveDone = resolve));
  const { result: elapsed, cpu } = await profile(async () => {
    const t0 = nowNs();
    const worker = await nest.worker(ctx, {
      concurrency: config.w2.concurrency,
      onJob: () => ++count === jobs && resolveDone(),
    });
    await allRan;
    while ((await nest.pending(ctx)) > 0) await sleep(2);
    const seconds = Number(nowNs() - t0) / 1e9;
    worker.closing = worker.close();
    return seconds;
  });
  console.log(
    `\n${seeded ? 'W4' : 'W2'}: ${jobs} jobs drained in ${elapsed.toFixed(2)} s, ${Math.round(jobs / elapsed)} jobs/s (in-process, boot included)`,
  );
  printStatements(jobs, 'job');
  printProfile(cpu);
  printInclusive(cpu);
  if (process.argv.includes('--allocations')) await w2Allocations(ctx, jobs);
}

/** W2 again under the sampling heap profiler: the bytes allocated per job, by allocating function. */
async function w2Allocations(ctx, jobs) {
  await nest.reset(ctx);
  await nest.prefill(ctx, jobs);
  let count = 0;
  let resolveDone;
  const allRan = new Promise((resolve) => (resolveDone = resolve));
  const { bySite, totalBytes } = await allocations(async () => {
    const worker = await nest.worker(ctx, {
      concurrency: config.w2.concurrency,
      onJob: () => ++count === jobs && resolveDone(),
    });
    await allRan;
    while ((await nest.pending(ctx)) > 0) await sleep(2);
    worker.closing = worker.close();
  });
  console.log(
    `  allocations (sampled), ${Math.round(totalBytes / jobs)} bytes per job in all; by function (and the library's caller):`,
  );
  [...bySite]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 25)
    .forEach(([site, bytes]) => console.log(`  ${String(Math.round(bytes / jobs)).padStart(6)} B/job  ${site}`));
}

async function w3(ctx) {
  const { jobs, ratePerSecond } = config.w3;
  await nest.reset(ctx);
  const starts = new Map();
  const worker = await nest.worker(ctx, {
    concurrency: config.w3.concurrency,
    onJob: (p) => p && p.i !== undefined && starts.set(p.i, nowNs()),
  });
  const producer = await nest.producer(ctx, { mode: 'latency' });
  await sleep(500);
  resetCounters();
  const sent = [];
  const returned = [];
  const start = nowNs();
  const interval = BigInt(Math.round(1e9 / ratePerSecond));
  const inFlight = [];
  for (let i = 0; i < jobs; i++) {
    const due = start + BigInt(i) * interval;
    const wait = Number(due - nowNs()) / 1e6;
    if (wait > 1) await sleep(wait - 0.5);
    while (nowNs() < due);
    sent[i] = nowNs();
    inFlight.push(producer.enqueue(`lat-${i}`, { i }).then(() => (returned[i] = nowNs())));
  }
  await Promise.all(inFlight);
  await sleep(500);
  const phases = { insert: [], notify: [], claimIssued: [], claim: [], dispatch: [], total: [], totalRiding: [] };
  const ms = (a, b) => Number(b - a) / 1e6;
  const claimOf = new Map(timeline.claims.map((claim) => [claim.i, claim]));
  let withOutcomes = 0;
  for (let i = 0; i < jobs; i++) {
    const t0 = sent[i];
    const body = starts.get(i);
    if (!body) continue;
    phases.total.push(ms(t0, body));
    phases.insert.push(ms(t0, returned[i]));
    const claim = claimOf.get(i);
    if (!claim) continue;
    if (claim.withOutcomes) {
      withOutcomes++;
      phases.totalRiding.push(ms(t0, body));
    }
    // The wake-up that led to this job's claim: the last notification after the enqueue began and before the claim.
    const notified = timeline.notifications.filter((t) => t >= t0 && t <= claim.start).pop();
    if (notified) phases.notify.push(ms(t0, notified));
    if (notified) phases.claimIssued.push(ms(notified, claim.start));
    phases.claim.push(ms(claim.start, claim.end));
    phases.dispatch.push(ms(claim.end, body));
  }
  console.log(`\nW3: ${jobs} enqueues at ${ratePerSecond}/s, producer and worker in one process`);
  const line = (name, xs, what) =>
    console.log(
      `  ${name.padEnd(34)} p50 ${median(xs)?.toFixed(2).padStart(6)} ms  p99 ${percentile(xs, 99)?.toFixed(2).padStart(6)} ms   ${what}`,
    );
  line('enqueue call (insert round trip)', phases.insert, 'enqueue() called -> resolved');
  line('NOTIFY delivered to the listener', phases.notify, 'enqueue() called -> notification event');
  line('notification -> claim sent', phases.claimIssued, '');
  line('claim round trip', phases.claim, 'the claim that took the job: sent -> rows back');
  line('claim back -> body starts', phases.dispatch, '');
  line('total enqueue -> start', phases.total, '');
  if (phases.totalRiding.length > 0)
    line('  of which taken by an outcome write', phases.totalRiding, 'a claim riding in a durable outcome write');
  console.log(
    `  claims matched to their job: ${phases.claim.length} of ${phases.total.length}; taken by a claim riding in an ` +
      `outcome write: ${withOutcomes}; a claim sent before the job's NOTIFY arrived: ${phases.claim.length - phases.notify.length}`,
  );
  printStatements(jobs, 'job');
  await producer.close();
  await worker.close();
}

async function main() {
  const which = (process.argv[2] || 'all').toLowerCase();
  const url = await recreateDatabase(config.adminUrl, 'profile_nest');
  const ctx = { databaseUrl: url, queueName: config.queueName, options: {} };
  await nest.install(ctx);
  console.log(`nest-dedup-queue from ${path.relative(process.cwd(), config.LIBRARY_DIST)}, database ${url}`);
  if (which === 'w1' || which === 'all') await w1(ctx);
  if (which === 'w2' || which === 'all') await w2(ctx);
  if (which === 'w3' || which === 'all') await w3(ctx);
  if (which === 'w4' || which === 'all') {
    await nest.reset(ctx);
    await nest.seedFinished(ctx, config.w4.finished);
    // Three drains in a row, as the benchmark's W4 does: the dead rows of one drain are still there for the next
    // (autovacuum waits for 20% of a 1,000,000-row table to be dead).
    for (let rep = 0; rep < 3; rep++) {
      await w2(ctx, { seeded: true });
      const [t] = await query(
        ctx.databaseUrl,
        `SELECT n_live_tup, n_dead_tup, last_autovacuum IS NOT NULL AS autovacuumed,
                pg_size_pretty(pg_relation_size('dedup_queue.workflows_ready')) AS ready_index
         FROM pg_stat_user_tables WHERE relid = 'dedup_queue.workflows'::regclass`,
      );
      console.log(`  after the drain: ${JSON.stringify(t)}`);
    }
  }
  await closePools();
  setTimeout(() => process.exit(0), 200);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
