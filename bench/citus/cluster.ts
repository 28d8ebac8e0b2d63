/*
 * npm run bench -- --citus (node -r ./test/support/swc-register.js bench/citus/cluster.ts): nest-dedup-queue on a
 * Citus cluster of its own (a coordinator and two workers, Citus 13, the Debian PostgreSQL 15 binaries,
 * test/support/citus-cluster.ts) next to one server of the same binaries and settings, interleaved, in one run:
 *
 * - W1: CITUS_W1_CALLS enqueue calls (default 4,000) from 16 concurrent callers over a tenth as many keys;
 * - W2: CITUS_W2_JOBS no-op workflows (default 5,000) drained by one worker (workerConcurrency 32), in one queue;
 *   and on the cluster, the same jobs spread over two queues held by the two worker nodes (16 slots each), timed
 *   from the first job's start;
 * - a lone enqueue: 300 sequential calls, p50, and a status look-up by each call's handle (one router statement on
 *   the cluster: the coordinator's overhead per statement is the difference);
 *
 * with the CPU per job of the worker process (this process) and of every PostgreSQL node (the postmaster's
 * processes, live and reaped), on the cluster split into the coordinator's and the worker nodes'. Medians of
 * CITUS_REPS (default 2). On 2 cores the cluster cannot be faster: its three servers share them with the worker.
 * Needs `npm run build`, the Debian postgresql-15 package and Citus. bench/citus/scale.ts (--citus-scale) holds each
 * server to a CPU quota instead, to see what more nodes add.
 */
import { startCitusCluster } from '../../test/support/citus-cluster';
import { TestPostgresServer, startPostgresServer } from '../../test/support/postgres-server';
import { CpuMeter, procCpuMeter } from './server-processes';
import {
  BenchDatabase,
  bootModule,
  drain,
  enqueueStorm,
  median,
  prefill,
  queuesSpreadOver,
  SINGLE_SERVER_SETTINGS,
  W1_QUEUE,
} from './workload';

const W1_CALLS = Number(process.env.CITUS_W1_CALLS ?? 4000);
const W2_JOBS = Number(process.env.CITUS_W2_JOBS ?? 5000);
const REPS = Number(process.env.CITUS_REPS ?? 2);
const LONE_CALLS = 300;
const log = (message: string) => process.stderr.write(`[citus ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

interface Target extends BenchDatabase {
  name: string;
  /** The worker nodes' servers, on the cluster: their sessions are counted. */
  workerNodes?: readonly TestPostgresServer[];
  /** The servers' CPU: the first server's (the coordinator, on the cluster), then the others'. */
  meter: CpuMeter;
  /** Two queues held by two different worker nodes (the cluster), or two queues of the one server. */
  queuePair: string[];
}

async function w1(target: Target, rep: number): Promise<number> {
  const producer = await bootModule(target, `bench_w1_${rep}`, false, [{ name: W1_QUEUE }]);
  try {
    const storm = await enqueueStorm([producer], W1_CALLS, target.meter);
    return storm.count / storm.seconds;
  } finally {
    await producer.app.close();
  }
}

/** p50 ms of a lone enqueue call, and of a status look-up through its handle (one router statement on Citus). */
async function lone(target: Target, rep: number): Promise<{ enqueueMs: number; lookUpMs: number }> {
  const { app, queues, tasks } = await bootModule(target, `bench_lone_${rep}`, false, [{ name: W1_QUEUE }]);
  try {
    const enqueues: number[] = [];
    const lookUps: number[] = [];
    for (let call = 0; call < LONE_CALLS; call++) {
      let started = performance.now();
      const handle = await queues.enqueue(W1_QUEUE, tasks.run, []);
      enqueues.push(performance.now() - started);
      started = performance.now();
      await handle.getStatus();
      lookUps.push(performance.now() - started);
    }
    return { enqueueMs: median(enqueues), lookUpMs: median(lookUps) };
  } finally {
    await app.close();
  }
}

/** Drains W2_JOBS jobs spread over `queueNames`; jobs/s and CPU µs per job. */
async function w2(target: Target, rep: number, queueNames: string[], label: string) {
  const schema = `bench_${label}_${rep}`;
  await prefill(target, schema, queueNames, W2_JOBS);
  const sessionsBefore = await workerNodeSessions(target);
  const run = await drain(target, schema, queueNames, W2_JOBS, target.meter);
  const sessionsOpened = (await workerNodeSessions(target)) - sessionsBefore;
  const postgres = run.serverCpuSeconds.reduce((sum, seconds) => sum + seconds, 0);
  return {
    jobsPerSecond: W2_JOBS / run.seconds,
    workerUsPerJob: (run.workerCpuSeconds * 1e6) / W2_JOBS,
    postgresUsPerJob: (postgres * 1e6) / W2_JOBS,
    /** The first server's share (the coordinator, on the cluster) and the others', µs per job. */
    firstServerUsPerJob: (run.serverCpuSeconds[0] * 1e6) / W2_JOBS,
    otherServersUsPerJob: ((postgres - run.serverCpuSeconds[0]) * 1e6) / W2_JOBS,
    workerNodeSessionsPer1000Jobs: (sessionsOpened * 1000) / W2_JOBS,
  };
}

/** Sessions ever opened on the worker nodes (`pg_stat_database.sessions`): the coordinator's connections to them. */
async function workerNodeSessions(target: Target): Promise<number> {
  let total = 0;
  for (const node of target.workerNodes ?? []) {
    const [row] = await node.query<{ sessions: string }>(
      `SELECT sessions FROM pg_stat_database WHERE datname = current_database()`,
    );
    total += Number(row.sessions);
  }
  return total;
}

async function main(): Promise<void> {
  log('starting one server and a Citus cluster (a coordinator, two workers) of the same binaries and settings');
  const single: TestPostgresServer = await startPostgresServer({
    binaries: 'debian',
    settings: SINGLE_SERVER_SETTINGS,
  });
  const cluster = await startCitusCluster();
  try {
    const pair = await queuesSpreadOver(cluster, 2);
    const targets: Target[] = [
      {
        name: 'one server',
        url: single.url,
        distribution: 'single',
        meter: procCpuMeter([single.dataDir]),
        queuePair: pair,
      },
      {
        name: 'Citus, 1 + 2 nodes',
        url: cluster.url,
        distribution: 'citus',
        meter: procCpuMeter([cluster.coordinator.dataDir, ...cluster.workers.map((worker) => worker.dataDir)]),
        workerNodes: cluster.workers,
        queuePair: pair,
      },
    ];
    const results = new Map<string, Record<string, number[]>>();
    const add = (target: Target, key: string, value: number) => {
      const row = results.get(target.name) ?? {};
      (row[key] ??= []).push(value);
      results.set(target.name, row);
    };
    for (let rep = 1; rep <= REPS; rep++) {
      for (const target of targets) {
        add(target, 'W1 calls/s', await w1(target, rep));
        log(`${target.name}: W1 done (repetition ${rep})`);
        const calls = await lone(target, rep);
        add(target, 'lone enqueue p50 ms', calls.enqueueMs);
        add(target, 'status look-up p50 ms', calls.lookUpMs);
        const one = await w2(target, rep, ['w2'], 'w2');
        add(target, 'W2 jobs/s', one.jobsPerSecond);
        add(target, 'W2 CPU µs/job worker', one.workerUsPerJob);
        add(target, 'W2 CPU µs/job Postgres', one.postgresUsPerJob);
        if (target.distribution === 'citus') {
          add(target, 'W2 CPU µs/job coordinator', one.firstServerUsPerJob);
          add(target, 'W2 CPU µs/job worker nodes', one.otherServersUsPerJob);
          add(target, 'W2 sessions opened on worker nodes per 1,000 jobs', one.workerNodeSessionsPer1000Jobs);
        }
        const two = await w2(target, rep, target.queuePair, 'w2pair');
        add(target, 'W2 over two queues jobs/s', two.jobsPerSecond);
        if (target.distribution === 'citus') {
          add(target, 'two queues: CPU µs/job coordinator', two.firstServerUsPerJob);
          add(target, 'two queues: CPU µs/job worker nodes', two.otherServersUsPerJob);
        }
        log(`${target.name}: W2 done (repetition ${rep})`);
      }
    }
    const columns = [...new Set([...results.values()].flatMap((row) => Object.keys(row)))];
    const lines = [
      `| | ${columns.join(' | ')} |`,
      `|---|${columns.map(() => '---:').join('|')}|`,
      ...targets.map(
        (target) =>
          `| ${target.name} | ${columns
            .map((column) => {
              const values = results.get(target.name)?.[column];
              if (!values) return '–';
              const value = median(values);
              return value >= 100 ? Math.round(value).toLocaleString('en-US') : value.toFixed(2);
            })
            .join(' | ')} |`,
      ),
    ];
    process.stdout.write(
      `Citus against one server: medians of ${REPS}, W1 ${W1_CALLS} calls, W2 ${W2_JOBS} jobs ` +
        `(two queues: ${pair.join(' and ')}, on the two worker nodes).\n\n${lines.join('\n')}\n`,
    );
  } finally {
    await cluster.stop();
    await single.dispose();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
