'use strict';
/*
 * What isolation costs and buys (issue 33, `@Workflow({ isolate: 'thread' })`), on one machine:
 *
 *   1. the event-loop delay of a worker process running 2 CPU-bound bodies (BENCH_SPIN_MS each, 2 at a time,
 *      BENCH_SPIN_ROUNDS rounds), isolated against on the main thread: p50, p99 and max of `monitorEventLoopDelay`;
 *   2. the overhead per run of a no-op body: BENCH_NOOPS no-op workflows one after another (workerConcurrency 1),
 *      isolated against not: wall-clock per run, and CPU per run of the whole process (every thread);
 *   3. the memory of an idle thread: the heap each thread uses once it has run a body (its Nest context built; after
 *      a GC), and the process's RSS (after a GC) with 1 idle thread and with BENCH_THREADS idle threads;
 *   4. W2 (workloads/w2-drain.js: BENCH_W2_JOBS no-op jobs, one worker process, 32 slots) with the drained workflow
 *      isolated against not, interleaved.
 *
 * Parts 1 to 3 run in this process; W2 forks its worker processes as `npm run bench` does. Medians of BENCH_REPS.
 *
 *   npm run build && node --expose-gc bench/isolation/measure.js    (BENCH_DATABASE_URL or DATABASE_URL)
 */
const { monitorEventLoopDelay } = require('node:perf_hooks');
const config = require('../lib/config');
const { recreateDatabase, closePools } = require('../lib/pg');
const { runRole } = require('../lib/proc');
const { drain } = require('../workloads/w2-drain');
const { IsolationBenchTasks } = require('./tasks');

const from = (id) => require(require.resolve(id, { paths: [config.LIBRARY_DIST] }));
const common = from('@nestjs/common');
const core = from('@nestjs/core');
const lib = require(config.LIBRARY_DIST);

const int = (name, fallback) => Number(process.env[name] ?? fallback);
const REPS = int('BENCH_REPS', 3);
const SPIN_MS = int('BENCH_SPIN_MS', 1000);
const SPIN_ROUNDS = int('BENCH_SPIN_ROUNDS', 3);
const NOOPS = int('BENCH_NOOPS', 500);
const THREADS = int('BENCH_THREADS', 4);
const SCHEMA = 'isolation_bench';

const log = (...args) => console.log(`[isolation] ${args.join(' ')}`);
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const settle = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function startApp(databaseUrl, queue, isolation) {
  class IsolationBenchModule {}
  common.Module({
    imports: [
      lib.DedupQueueModule.forRoot({ connection: { url: databaseUrl }, schema: SCHEMA, queues: [queue], isolation }),
    ],
    providers: [IsolationBenchTasks],
  })(IsolationBenchModule);
  const app = await core.NestFactory.createApplicationContext(IsolationBenchModule, { logger: ['error', 'warn'] });
  return { app, queues: app.get(lib.QueueService), tasks: app.get(IsolationBenchTasks) };
}

/** Part 1: the event loop's delay while 2 bodies spin, `BENCH_SPIN_ROUNDS` times. */
async function eventLoopDelay(databaseUrl, isolated) {
  const { app, queues, tasks } = await startApp(databaseUrl, { name: 'spins', workerConcurrency: 2 }, { threads: 2 });
  try {
    const workflow = isolated ? tasks.spin : tasks.spinHere;
    await spinRound(queues, workflow, 10);
    const histogram = monitorEventLoopDelay({ resolution: 10 });
    histogram.enable();
    for (let round = 0; round < SPIN_ROUNDS; round++) await spinRound(queues, workflow, SPIN_MS);
    histogram.disable();
    return { p50Ms: histogram.percentile(50) / 1e6, p99Ms: histogram.percentile(99) / 1e6, maxMs: histogram.max / 1e6 };
  } finally {
    await app.close();
  }
}

async function spinRound(queues, workflow, ms) {
  const handles = await Promise.all([0, 1].map(() => queues.enqueue('spins', workflow, [ms])));
  await Promise.all(handles.map((handle) => handle.getResult({ timeoutMs: 120_000 })));
}

/** Part 2: `BENCH_NOOPS` no-op runs one after another: wall-clock and CPU (all threads) per run. */
async function noopRuns(databaseUrl, isolated) {
  const { app, queues, tasks } = await startApp(databaseUrl, { name: 'serial', workerConcurrency: 1 }, { threads: 1 });
  try {
    const workflow = isolated ? tasks.noop : tasks.noopHere;
    const run = async (count) => {
      const items = Array.from({ length: count }, () => ({ args: [] }));
      const results = await queues.enqueueMany('serial', workflow, items);
      await (await queues.retrieve(results.at(-1).workflowId)).getResult({ timeoutMs: 300_000 });
    };
    await run(20);
    const cpu = process.cpuUsage();
    const started = performance.now();
    await run(NOOPS);
    const elapsedMs = performance.now() - started;
    const { user, system } = process.cpuUsage(cpu);
    return { msPerRun: elapsedMs / NOOPS, cpuUsPerRun: (user + system) / NOOPS };
  } finally {
    await app.close();
  }
}

/** Part 3: RSS with 1 idle thread (the one that checked the workflows at boot) and with `BENCH_THREADS` idle ones. */
async function idleThreadMemory(databaseUrl) {
  const queue = { name: 'spins', workerConcurrency: THREADS };
  const { app, queues, tasks } = await startApp(databaseUrl, queue, { threads: THREADS });
  const rss = async () => {
    await settle(1000);
    global.gc?.();
    return process.memoryUsage().rss / 2 ** 20;
  };
  try {
    const one = await rss();
    const handles = await Promise.all(
      Array.from({ length: THREADS }, () => queues.enqueue('spins', tasks.heap, [300])),
    );
    const heaps = await Promise.all(handles.map((handle) => handle.getResult({ timeoutMs: 60_000 })));
    const all = await rss();
    return {
      threadHeapMiB: median(heaps) / 2 ** 20,
      oneThreadRssMiB: one,
      allThreadsRssMiB: all,
      rssPerThreadMiB: (all - one) / (THREADS - 1),
    };
  } finally {
    await app.close();
  }
}

async function main() {
  // NOTE: an application context's own timers do not hold the process; this does while the measurements wait.
  const keepAlive = setInterval(() => undefined, 1000);
  const databaseUrl = await recreateDatabase(config.adminUrl, 'isolation');
  log(`database ${new URL(databaseUrl).pathname.slice(1)}; ${REPS} repetitions; 2 cores shared: read with care`);
  if (!global.gc) log('run with node --expose-gc for the memory figures after a GC');
  const results = { eventLoop: { isolated: [], mainThread: [] }, noop: { isolated: [], mainThread: [] } };

  for (let rep = 0; rep < REPS; rep++) {
    for (const isolated of rep % 2 ? [true, false] : [false, true]) {
      const key = isolated ? 'isolated' : 'mainThread';
      results.eventLoop[key].push(await eventLoopDelay(databaseUrl, isolated));
      results.noop[key].push(await noopRuns(databaseUrl, isolated));
      log(
        `rep ${rep + 1} ${key}:`,
        JSON.stringify(results.eventLoop[key].at(-1)),
        JSON.stringify(results.noop[key].at(-1)),
      );
    }
  }
  results.memory = await idleThreadMemory(databaseUrl);
  log('memory:', JSON.stringify(results.memory));

  const nest = {
    id: 'nest-dedup-queue',
    module: 'nest-dedup-queue',
    adapter: require('../systems/nest-dedup-queue'),
  };
  const ctx = (isolate) => ({
    databaseUrl,
    adminUrl: config.adminUrl,
    queueName: config.queueName,
    options: { isolate },
  });
  await runRole({ module: nest.module, ctx: ctx(false), role: 'install' }, 120_000);
  results.w2 = { isolated: [], mainThread: [] };
  for (let rep = 0; rep < REPS; rep++) {
    for (const isolate of rep % 2 ? [true, false] : [false, true]) {
      const result = await drain(nest, ctx(isolate), config, { jobs: config.w2.jobs });
      results.w2[isolate ? 'isolated' : 'mainThread'].push(result);
      const cpu = result.cpu ? `, worker CPU ${Math.round(result.cpu.workerUsPerJob)} µs/job` : '';
      log(
        `W2 rep ${rep + 1} ${isolate ? 'isolated' : 'main thread'}: ${Math.round(result.perSecond)} jobs/s${cpu}`,
        result.ok ? '' : result.problems.join('; '),
      );
    }
  }
  await closePools();
  clearInterval(keepAlive);

  const summary = (runs, field) => ({
    isolated: median(runs.isolated.map((run) => field(run))),
    mainThread: median(runs.mainThread.map((run) => field(run))),
  });
  console.log(
    JSON.stringify(
      {
        eventLoopDelayP99Ms: summary(results.eventLoop, (run) => run.p99Ms),
        eventLoopDelayMaxMs: summary(results.eventLoop, (run) => run.maxMs),
        noopMsPerRun: summary(results.noop, (run) => run.msPerRun),
        noopCpuUsPerRun: summary(results.noop, (run) => run.cpuUsPerRun),
        idleThreadHeapMiB: results.memory.threadHeapMiB,
        idleThreadRssMiB: results.memory.rssPerThreadMiB,
        w2JobsPerSecond: summary(results.w2, (run) => run.perSecond),
        w2WorkerCpuUsPerJob: summary(results.w2, (run) => run.cpu?.workerUsPerJob ?? NaN),
      },
      null,
      2,
    ),
  );
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
