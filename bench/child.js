'use strict';
/*
 * One measured process: `node child.js '<json>'`, forked by the orchestrator with an IPC channel.
 * The JSON names the system adapter, its context and the role:
 *   install          run the system's migrations / queue creation
 *   storm            W1: producers enqueue a shuffled key sequence, report calls/s and acceptances
 *   enqueue-many     enqueue n fresh jobs through the system's public API (prefill for systems without a bulk path)
 *   worker           W2/W3/W5: run the system's worker; report first start, all bodies done, or latencies
 *   latency-producer W3: enqueue at a fixed rate, each payload carrying its enqueue timestamp
 * Timestamps are process.hrtime (CLOCK_MONOTONIC), comparable across processes on one machine.
 */
const path = require('node:path');
const { shuffle, nowNs, sleep } = require('./lib/stats');

const spec = JSON.parse(process.argv[2]);
const adapter = require(path.join(__dirname, 'systems', spec.module));
const ctx = spec.ctx;

const send = (message) => process.send && process.send(message);
const finish = (message) => process.send(message, () => setTimeout(() => process.exit(0), 20));
process.on('unhandledRejection', (error) => {
  send({ type: 'error', message: String((error && error.stack) || error) });
  process.exit(1);
});

async function main() {
  switch (spec.role) {
    case 'install':
      await adapter.install(ctx);
      return finish({ type: 'result' });
    case 'storm':
      // A system that is its own load generator (pgbench) runs the storm itself.
      return finish({ type: 'result', ...(await (adapter.storm ? adapter.storm(ctx, spec.args) : storm(spec.args))) });
    case 'enqueue-many':
      return finish({ type: 'result', ...(await enqueueMany(spec.args)) });
    case 'latency-producer':
      return finish({ type: 'result', ...(await latencyProducer(spec.args)) });
    case 'worker':
      return worker(spec.args);
    default:
      throw new Error(`unknown role ${spec.role}`);
  }
}

/** W1: `calls` enqueues over `keys` keys (calls/keys each), shuffled, pulled by `producers` concurrent loops. */
async function storm({ calls, keys, producers, maxSeconds }) {
  const sequence = [];
  for (let i = 0; i < calls; i++) sequence.push(i % keys);
  shuffle(sequence);
  const producer = await adapter.producer(ctx, { mode: 'storm' });
  let next = 0;
  let accepted = 0;
  let errors = 0;
  let firstError;
  const cpu0 = process.cpuUsage();
  const t0 = nowNs();
  const deadline = Date.now() + maxSeconds * 1000;
  await Promise.all(
    Array.from({ length: producers }, async () => {
      while (next < sequence.length && Date.now() < deadline) {
        const i = next++;
        try {
          if (await producer.enqueue(`key-${sequence[i]}`, { i })) accepted++;
        } catch (error) {
          errors++;
          firstError ??= String((error && error.message) || error);
        }
      }
    }),
  );
  const elapsedNs = Number(nowNs() - t0);
  const cpu = process.cpuUsage(cpu0);
  await producer.close();
  // `next` calls were made (all of them unless the time cap cut the storm short).
  const cpuSeconds = (cpu.user + cpu.system) / 1e6;
  return { calls: next, accepted, errors, firstError, elapsedNs, perSecond: next / (elapsedNs / 1e9), cpuSeconds };
}

/** Prefill through the public enqueue API: n distinct keys, `producers` concurrent loops. */
async function enqueueMany({ n, producers = 16, keyPrefix = 'p' }) {
  const producer = await adapter.producer(ctx, { mode: 'prefill' });
  let next = 0;
  let accepted = 0;
  const t0 = nowNs();
  await Promise.all(
    Array.from({ length: producers }, async () => {
      while (next < n) {
        const i = next++;
        if (await producer.enqueue(`${keyPrefix}${i}`, { i })) accepted++;
      }
    }),
  );
  const elapsedNs = Number(nowNs() - t0);
  await producer.close();
  return { accepted, elapsedNs };
}

/** W3 producer: open loop at a fixed rate (a slow enqueue does not delay the next one). */
async function latencyProducer({ jobs, ratePerSecond }) {
  const producer = await adapter.producer(ctx, { mode: 'latency' });
  // Warm the connection pool with a few enqueues that the worker also runs (not measured: no t0).
  for (let w = 0; w < 5; w++) await producer.enqueue(`warm-${w}-${Date.now()}`, { warm: true });
  await sleep(200);
  const intervalNs = BigInt(Math.round(1e9 / ratePerSecond));
  const start = nowNs();
  const inFlight = [];
  const callMs = new Float64Array(jobs);
  let errors = 0;
  let firstError;
  let maxLagMs = 0;
  for (let i = 0; i < jobs; i++) {
    const due = start + BigInt(i) * intervalNs;
    let now = nowNs();
    if (due > now + 1_000_000n) {
      await sleep(Number(due - now) / 1e6 - 0.5);
      now = nowNs();
    }
    while (now < due) now = nowNs(); // the last half millisecond: spin for an accurate send time
    maxLagMs = Math.max(maxLagMs, Number(now - due) / 1e6);
    const t0 = nowNs();
    inFlight.push(
      producer.enqueue(`lat-${i}`, { i, t0: t0.toString() }).then(
        (ok) => {
          callMs[i] = Number(nowNs() - t0) / 1e6;
          if (!ok) errors++;
        },
        (error) => {
          errors++;
          firstError ??= String((error && error.message) || error);
        },
      ),
    );
  }
  await Promise.all(inFlight);
  const elapsedNs = Number(nowNs() - start);
  await producer.close();
  const calls = Array.from(callMs).sort((a, b) => a - b);
  const callP50Ms = calls[Math.floor((calls.length - 1) / 2)];
  return { jobs, errors, firstError, maxLagMs, callP50Ms, achievedRate: jobs / (elapsedNs / 1e9) };
}

/** The worker: counts bodies; in 'drain' mode reports when `expect` bodies ran, in 'latency' mode their latencies. */
async function worker({ mode, expect, concurrency }) {
  let count = 0;
  let tFirst = null;
  const latencies = mode === 'latency' ? new Float64Array(expect) : null;
  let measured = 0;
  const runsOf = mode === 'latency' ? new Uint8Array(expect) : null;
  const onJob = (payload) => {
    const now = nowNs();
    if (payload && payload.warm) return;
    if (latencies) {
      if (payload && payload.t0 !== undefined && payload.i < expect) runsOf[payload.i]++;
      if (payload && payload.t0 !== undefined && measured < expect) {
        latencies[measured++] = Number(now - BigInt(payload.t0)) / 1e6;
        if (measured === expect) send({ type: 'latencies', values: Array.from(latencies) });
      }
      return;
    }
    if (tFirst === null) {
      tFirst = now;
      send({ type: 'first', t: now.toString() });
    }
    count++;
    if (count === expect) send({ type: 'bodies-done', tFirst: tFirst.toString(), tLast: now.toString(), count });
  };

  const handle = await adapter.worker(ctx, { concurrency, onJob });
  // The worker is started (its boot has ended); `firstClaim` when the adapter can tell when it first asked for work.
  const tReady = nowNs();
  const firstClaim = handle.firstClaimNs ? handle.firstClaimNs() : null;
  send({ type: 'ready', tReady: tReady.toString(), tFirstClaim: firstClaim === null ? null : firstClaim.toString() });
  process.on('message', async (message) => {
    if (message && message.type === 'stop') {
      const closing = Promise.resolve()
        .then(() => handle.close())
        .catch(() => {});
      await Promise.race([closing, sleep(10_000)]);
      const claim = handle.firstClaimNs ? handle.firstClaimNs() : null;
      const statements = handle.statements ? handle.statements() : null;
      // W3: which jobs never ran, and which ran more than once (the first few of each).
      const never = runsOf ? [...runsOf.keys()].filter((i) => runsOf[i] === 0) : [];
      const twice = runsOf ? [...runsOf.keys()].filter((i) => runsOf[i] > 1) : [];
      const runs = runsOf
        ? { never: never.length, neverFirst: never.slice(0, 20), twice: twice.length, twiceFirst: twice.slice(0, 20) }
        : null;
      send({
        type: 'stopped',
        count,
        measured,
        runs,
        statements,
        tFirstClaim: claim === null ? null : claim.toString(),
      });
      setTimeout(() => process.exit(0), 50);
    }
  });
}

main().catch((error) => {
  send({ type: 'error', message: String((error && error.stack) || error) });
  setTimeout(() => process.exit(1), 50);
});
