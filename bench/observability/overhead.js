'use strict';
/*
 * The overhead of metrics and tracing on throughput: for each mode (none, metrics, tracing, both), interleaved, a
 * fresh schema; 5,000 single `enqueue` calls from 16 concurrent producers (calls/s), then one worker process
 * (this one, workerConcurrency 32) drains them (jobs/s from resuming the paused queue until the database shows all
 * 5,000 SUCCESS). Metrics: a prom-client Registry scraped once a second during both phases. Tracing: a
 * NodeTracerProvider with a BatchSpanProcessor and an exporter that drops the spans (the cost of making them).
 *
 *   node bench/observability/overhead.js     (BENCH_DATABASE_URL or DATABASE_URL; BENCH_JOBS, BENCH_REPS)
 */
const { DATABASE_URL, Pool, fromRoot, median, startApp } = require('./common');

const JOBS = Number(process.env.BENCH_JOBS ?? 5000);
const REPS = Number(process.env.BENCH_REPS ?? 3);
const PRODUCERS = 16;
const SCHEMA = 'bench_obs_overhead';
const MODES = ['none', 'metrics', 'tracing', 'metrics+tracing'];

const { trace } = fromRoot('@opentelemetry/api');
const { BatchSpanProcessor } = fromRoot('@opentelemetry/sdk-trace-base');
const { NodeTracerProvider } = fromRoot('@opentelemetry/sdk-trace-node');
const { Registry } = fromRoot('prom-client');

async function runOnce(mode, pool) {
  await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  const traced = mode.includes('tracing');
  const provider = traced
    ? new NodeTracerProvider({
        spanProcessors: [new BatchSpanProcessor({ export: (spans, done) => done({ code: 0 }), shutdown: async () => {} })],
      })
    : undefined;
  provider?.register();
  const registry = mode.includes('metrics') ? new Registry() : undefined;
  const options = { schema: SCHEMA, queues: [{ name: 'bench', workerConcurrency: 32 }], ...(registry ? { metrics: { registry } } : {}) };
  const scraper = registry && setInterval(() => void registry.metrics(), 1000);
  try {
    const producer = await startApp({ ...options, worker: false });
    await producer.queues.pauseQueue('bench');
    let next = 0;
    let started = performance.now();
    await Promise.all(
      Array.from({ length: PRODUCERS }, async () => {
        while (next < JOBS) {
          const i = next++;
          await producer.queues.enqueue('bench', 'BenchTasks.run', [i], { deduplicationId: `k${i}` });
        }
      }),
    );
    const enqueueSeconds = (performance.now() - started) / 1000;
    await producer.app.close();

    const worker = await startApp(options);
    started = performance.now();
    await worker.queues.resumeQueue('bench');
    for (;;) {
      const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${SCHEMA}.workflows WHERE status = 'SUCCESS'`);
      if (rows[0].n >= JOBS) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const drainSeconds = (performance.now() - started) / 1000;
    await worker.app.close();
    return { enqueuePerSecond: JOBS / enqueueSeconds, drainPerSecond: JOBS / drainSeconds };
  } finally {
    clearInterval(scraper);
    if (provider) {
      await provider.shutdown();
      trace.disable();
    }
  }
}

async function main() {
  const pool = new Pool({ connectionString: DATABASE_URL, max: 2 });
  pool.on('error', () => undefined);
  const results = Object.fromEntries(MODES.map((mode) => [mode, []]));
  for (let rep = 0; rep < REPS; rep++) {
    for (const mode of MODES) {
      const result = await runOnce(mode, pool);
      results[mode].push(result);
      console.log(`rep ${rep + 1} ${mode}: enqueue ${result.enqueuePerSecond.toFixed(0)} calls/s, drain ${result.drainPerSecond.toFixed(0)} jobs/s`);
    }
  }
  await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  await pool.end();
  const base = results.none;
  const table = Object.fromEntries(
    MODES.map((mode) => {
      const enqueue = median(results[mode].map((r) => r.enqueuePerSecond));
      const drain = median(results[mode].map((r) => r.drainPerSecond));
      const baseEnqueue = median(base.map((r) => r.enqueuePerSecond));
      const baseDrain = median(base.map((r) => r.drainPerSecond));
      return [
        mode,
        {
          'enqueue calls/s': Math.round(enqueue),
          'vs none': `${(((enqueue - baseEnqueue) / baseEnqueue) * 100).toFixed(1)}%`,
          'drain jobs/s': Math.round(drain),
          'vs none ': `${(((drain - baseDrain) / baseDrain) * 100).toFixed(1)}%`,
        },
      ];
    }),
  );
  console.log(`\n${JOBS} jobs, medians of ${REPS}`);
  console.table(table);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
