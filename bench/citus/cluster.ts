/*
 * npm run bench -- --citus (node -r ./test/support/swc-register.js bench/citus/cluster.ts): nest-dedup-queue on a
 * Citus cluster of its own (a coordinator and two workers, Citus 13, the Debian PostgreSQL 15 binaries,
 * test/support/citus-cluster.ts) next to one server of the same binaries and settings, interleaved, in one run:
 *
 * - W1: CITUS_W1_CALLS enqueue calls (default 4,000) from 16 concurrent callers over a tenth as many keys;
 * - W2: CITUS_W2_JOBS no-op workflows (default 5,000) drained by one worker (workerConcurrency 32), in one queue;
 *   and on the cluster, the same jobs spread over two queues held by the two worker nodes;
 * - a lone enqueue: 300 sequential calls, p50, and a status look-up by each call's handle (one router statement on
 *   the cluster: the coordinator's overhead per statement is the difference);
 *
 * with the CPU per job of the worker process (this process) and of every PostgreSQL node (the postmaster's
 * processes, live and reaped), on the cluster split into the coordinator's and the worker nodes'. Medians of CITUS_REPS (default 2). On 2 cores the cluster cannot be faster: its
 * three servers share them with the worker. Needs `npm run build`, the Debian postgresql-15 package and Citus.
 */
import 'reflect-metadata';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { DedupQueueModule, QueueService, Workflow } from 'nest-dedup-queue';
import { CitusCluster, startCitusCluster } from '../../test/support/citus-cluster';
import { TestPostgresServer, startPostgresServer } from '../../test/support/postgres-server';

const W1_CALLS = Number(process.env.CITUS_W1_CALLS ?? 4000);
const W2_JOBS = Number(process.env.CITUS_W2_JOBS ?? 5000);
const REPS = Number(process.env.CITUS_REPS ?? 2);
const LONE_CALLS = 300;
const TICKS = 100;
const log = (message: string) => process.stderr.write(`[citus ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

@Injectable()
class BenchTasks {
  @Workflow()
  async run(): Promise<void> {}
}

interface Target {
  name: string;
  /** The worker nodes' servers, on the cluster: their sessions are counted. */
  workerNodes?: readonly TestPostgresServer[];
  url: string;
  distribution: 'single' | 'citus';
  dataDirs: string[];
  /** Two queues held by two different worker nodes (the cluster), or two queues of the one server. */
  queuePair: [string, string];
}

/** utime + stime of the postmaster of `dataDir`, its reaped children and its live ones, in seconds. */
function postgresCpuSeconds(dataDir: string): number {
  const postmaster = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  let total = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const pid = Number(entry);
      if (pid === postmaster) {
        total += Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]);
      } else if (Number(fields[1]) === postmaster) {
        total += Number(fields[11]) + Number(fields[12]);
      }
    } catch {
      // the process ended while we looked
    }
  }
  return total / TICKS;
}

/** CPU seconds spent since the call: the worker process's, and each PostgreSQL server's (in `dataDirs` order). */
function cpu(target: Target): () => { worker: number; postgres: number; byServer: number[] } {
  const workerBefore = process.cpuUsage();
  const postgresBefore = target.dataDirs.map(postgresCpuSeconds);
  return () => {
    const worker = process.cpuUsage(workerBefore);
    const byServer = target.dataDirs.map((dir, i) => postgresCpuSeconds(dir) - postgresBefore[i]);
    return {
      worker: (worker.user + worker.system) / 1e6,
      postgres: byServer.reduce((sum, seconds) => sum + seconds, 0),
      byServer,
    };
  };
}

async function boot(target: Target, schema: string, worker: boolean) {
  @Module({
    imports: [
      DedupQueueModule.forRoot({
        connection: { url: target.url, poolSize: 20 },
        distribution: target.distribution,
        schema,
        queues: [
          { name: 'w1' },
          { name: 'w2', workerConcurrency: 32 },
          ...target.queuePair.map((name) => ({ name, workerConcurrency: 16 })),
        ],
        worker,
      }),
    ],
    providers: [BenchTasks],
  })
  class CitusBenchModule {}
  const app = await NestFactory.createApplicationContext(CitusBenchModule, { logger: ['error', 'warn'] });
  return { app, queues: app.get(QueueService), tasks: app.get(BenchTasks) };
}

async function w1(target: Target, rep: number): Promise<number> {
  const { app, queues, tasks } = await boot(target, `bench_w1_${rep}`, false);
  try {
    const keys = W1_CALLS / 10;
    let next = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < W1_CALLS) {
          const call = next++;
          await queues.enqueue('w1', tasks.run, [], { deduplicationId: `k${call % keys}` }).catch(() => undefined);
        }
      }),
    );
    return W1_CALLS / ((performance.now() - started) / 1000);
  } finally {
    await app.close();
  }
}

/** p50 ms of a lone enqueue call, and of a status look-up through its handle (one router statement on Citus). */
async function lone(target: Target, rep: number): Promise<{ enqueueMs: number; lookUpMs: number }> {
  const { app, queues, tasks } = await boot(target, `bench_lone_${rep}`, false);
  try {
    const enqueues: number[] = [];
    const lookUps: number[] = [];
    for (let call = 0; call < LONE_CALLS; call++) {
      let started = performance.now();
      const handle = await queues.enqueue('w1', tasks.run, []);
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
  const producer = await boot(target, schema, false);
  const perQueue = W2_JOBS / queueNames.length;
  for (const queueName of queueNames) {
    for (let done = 0; done < perQueue; done += 1000) {
      await producer.queues.enqueueMany(
        queueName,
        producer.tasks.run,
        Array.from({ length: Math.min(1000, perQueue - done) }, () => ({ args: [] })),
      );
    }
  }
  await producer.app.close();
  const sessionsBefore = await workerNodeSessions(target);
  const usage = cpu(target);
  const started = performance.now();
  const worker = await boot(target, schema, true);
  // Counted per queue: on the cluster a count across queues asks every shard, and its parallel connections to the
  // worker nodes would be counted as the jobs' cost.
  const succeeded = async (queueName: string) =>
    (await worker.queues.countByStatus(queueName))[queueName]?.SUCCESS ?? 0;
  for (;;) {
    const finished = (await Promise.all(queueNames.map(succeeded))).reduce((sum, count) => sum + count, 0);
    if (finished >= W2_JOBS) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const seconds = (performance.now() - started) / 1000;
  const spent = usage();
  const sessionsOpened = (await workerNodeSessions(target)) - sessionsBefore;
  await worker.app.close();
  return {
    jobsPerSecond: W2_JOBS / seconds,
    workerUsPerJob: (spent.worker * 1e6) / W2_JOBS,
    postgresUsPerJob: (spent.postgres * 1e6) / W2_JOBS,
    /** The first server's share (the coordinator, on the cluster) and the others', µs per job. */
    firstServerUsPerJob: (spent.byServer[0] * 1e6) / W2_JOBS,
    otherServersUsPerJob: ((spent.postgres - spent.byServer[0]) * 1e6) / W2_JOBS,
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

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

async function queuesOnTwoNodes(cluster: CitusCluster): Promise<[string, string]> {
  // The shard of a queue is known once the tables exist: a first boot creates them.
  const first = await boot(
    { name: 'cluster', url: cluster.url, distribution: 'citus', dataDirs: [], queuePair: ['p0', 'p1'] },
    'bench_placement',
    false,
  );
  await first.app.close();
  const byNode: Array<string | undefined> = [undefined, undefined];
  for (let n = 0; n < 64 && byNode.includes(undefined); n++) {
    const name = `spread-${n}`;
    const index = await cluster.workerIndexFor('bench_placement.workflow_queue', name);
    byNode[index] ??= name;
  }
  return byNode as [string, string];
}

async function main(): Promise<void> {
  const settings = { shared_buffers: '16MB', max_connections: '100' };
  log('starting one server and a Citus cluster (a coordinator, two workers) of the same binaries and settings');
  const single: TestPostgresServer = await startPostgresServer({ binaries: 'debian', settings });
  const cluster = await startCitusCluster();
  try {
    const pair = await queuesOnTwoNodes(cluster);
    const targets: Target[] = [
      { name: 'one server', url: single.url, distribution: 'single', dataDirs: [single.dataDir], queuePair: pair },
      {
        name: 'Citus, 1 + 2 nodes',
        url: cluster.url,
        distribution: 'citus',
        dataDirs: [cluster.coordinator.dataDir, ...cluster.workers.map((worker) => worker.dataDir)],
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
