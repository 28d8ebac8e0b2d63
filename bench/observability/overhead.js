'use strict';
/*
 * The overhead of metrics and tracing on throughput: for each mode (none, metrics, tracing, both), interleaved, a
 * fresh schema; 5,000 single `enqueue` calls from 16 concurrent producers (calls/s), then one worker process
 * (this one, workerConcurrency 32) drains them (jobs/s from resuming the paused queue until the database shows all
 * 5,000 SUCCESS), with the CPU time this process spent per job (steadier than rates on a shared machine).
 * Metrics: a prom-client Registry scraped once a second during both phases. Tracing: a
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

function cpuMicros(usage) {
  return usage.user + usage.system;
}

async function runOnce(mode, pool) {
  await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  const traced = mode.includes('tracing');
  const provider = traced
    ? new NodeTracerProvider({
        spanProcessors: [
          new BatchSpanProcessor({ export: (spans, done) => done({ code: 0 }), shutdown: async () => {} }),
        ],
      })
    : undefined;
  provider?.register();
  const registry = mode.includes('metrics') ? new Registry() : undefined;
  const options = {
    schema: SCHEMA,
    queues: [{ name: 'bench', workerConcurrency: 32 }],
    ...(registry ? { metrics: { registry } } : {}),
  };
  const scraper = registry && setInterval(() => void registry.metrics(), 1000);
  try {
    const producer = await startApp({ ...options, worker: false });
    await producer.queues.pauseQueue('bench');
    let next = 0;
    let started = performance.now();
    let cpu = process.cpuUsage();
    await Promise.all(
      Array.from({ length: PRODUCERS }, async () => {
        while (next < JOBS) {
          const i = next++;
          await producer.queues.enqueue('bench', 'BenchTasks.run', [i], { deduplicationId: `k${i}` });
        }
      }),
    );
    const enqueueSeconds = (performance.now() - started) / 1000;
    const enqueueCpu = cpuMicros(process.cpuUsage(cpu));
    await producer.app.close();

    const worker = await startApp(options);
    started = performance.now();
    cpu = process.cpuUsage();
    await worker.queues.resumeQueue('bench');
    for (;;) {
      const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${SCHEMA}.workflows WHERE status = 'SUCCESS'`);
      if (rows[0].n >= JOBS) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const drainSeconds = (performance.now() - started) / 1000;
    const drainCpu = cpuMicros(process.cpuUsage(cpu));
    await worker.app.close();
    return {
      enqueuePerSecond: JOBS / enqueueSeconds,
      drainPerSecond: JOBS / drainSeconds,
      enqueueCpuMicrosPerJob: enqueueCpu / JOBS,
      drainCpuMicrosPerJob: drainCpu / JOBS,
    };
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
      console.log(
        `rep ${rep + 1} ${mode}: enqueue ${result.enqueuePerSecond.toFixed(0)} calls/s ` +
          `(${result.enqueueCpuMicrosPerJob.toFixed(0)} µs CPU/call), drain ${result.drainPerSecond.toFixed(0)} jobs/s ` +
          `(${result.drainCpuMicrosPerJob.toFixed(0)} µs CPU/job)`,
      );
    }
  }
  await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  await pool.end();
  const medianOf = (mode, field) => median(results[mode].map((result) => result[field]));
  const change = (mode, field) => {
    const base = medianOf('none', field);
    return `${(((medianOf(mode, field) - base) / base) * 100).toFixed(1)}%`;
  };
  const table = Object.fromEntries(
    MODES.map((mode) => [
      mode,
      {
        'enqueue calls/s': Math.round(medianOf(mode, 'enqueuePerSecond')),
        'Δ enqueue': change(mode, 'enqueuePerSecond'),
        'CPU µs/call': Math.round(medianOf(mode, 'enqueueCpuMicrosPerJob')),
        'drain jobs/s': Math.round(medianOf(mode, 'drainPerSecond')),
        'Δ drain': change(mode, 'drainPerSecond'),
        'CPU µs/job': Math.round(medianOf(mode, 'drainCpuMicrosPerJob')),
      },
    ]),
  );
  console.log(`\n${JOBS} jobs, medians of ${REPS}`);
  console.table(table);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
