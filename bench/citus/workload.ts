/*
 * What the Citus benchmarks (cluster.ts, scale.ts) run against one server or a cluster's coordinator: the module in
 * a Nest application context on a schema of the measurement's own, W1 (an enqueue storm), W2 (a prefill, then a
 * drain by one worker), and the choice of queue names held by given worker nodes.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Client } from 'pg';
import { DedupQueueModule, QueueOptions, QueueService, Workflow } from 'nest-dedup-queue';
import { CitusCluster } from '../../test/support/citus-cluster';
import { CpuMeter } from './server-processes';
import { drainProfiler } from './drain-profiler';

/** Where the module connects: one server, or a Citus cluster's coordinator. */
export interface BenchDatabase {
  url: string;
  distribution: 'single' | 'citus';
}

/** One measured run: what it did, in how long, and the CPU of the worker process and of each server. */
export interface Measured {
  /** Calls made (W1) or jobs drained (W2). */
  count: number;
  seconds: number;
  workerCpuSeconds: number;
  /** In the order of the meter's servers. */
  serverCpuSeconds: number[];
}

/** The one server's settings, as a cluster node's (test/support/citus-cluster.ts) without Citus. */
export const SINGLE_SERVER_SETTINGS = { shared_buffers: '16MB', max_connections: '100' };

/** The slots of the draining worker process (CITUS_SCALE_SLOTS, default 32), shared equally by the queues of a drain. */
export const WORKER_SLOTS = Number(process.env.CITUS_SCALE_SLOTS || 32);
if (!Number.isInteger(WORKER_SLOTS) || WORKER_SLOTS < 1) {
  throw new Error(`CITUS_SCALE_SLOTS=${process.env.CITUS_SCALE_SLOTS}: expected a whole number of slots, 1 or more`);
}
const PREFILL_BATCH = 1000;
const W1_CALLERS = 16;
/** A drain not done by then failed (its jobs are not all recorded as succeeded). */
const DRAIN_TIMEOUT_MS = 600_000;

let onFirstJob: (() => void) | undefined;
/** The bodies run in this process: a drain reads the database's counts only once they reach its jobs. */
let bodiesRun = 0;

@Injectable()
export class BenchTasks {
  /** A no-op workflow; the first run of a drain starts its clock. */
  @Workflow()
  run(): Promise<void> {
    bodiesRun += 1;
    const first = onFirstJob;
    onFirstJob = undefined;
    first?.();
    return Promise.resolve();
  }
}

/** The module on `schema` of `database` with `queues`, in an application context (`worker`: whether it drains). */
export async function bootModule(database: BenchDatabase, schema: string, worker: boolean, queues: QueueOptions[]) {
  @Module({
    imports: [
      DedupQueueModule.forRoot({
        connection: { url: database.url, poolSize: 20 },
        distribution: database.distribution,
        schema,
        queues,
        worker,
      }),
    ],
    providers: [BenchTasks],
  })
  class CitusBenchModule {}
  const app = await NestFactory.createApplicationContext(CitusBenchModule, { logger: ['error', 'warn'] });
  return { app, queues: app.get(QueueService), tasks: app.get(BenchTasks) };
}

/**
 * How a drain's worker gives its slots to the queues: `split` equally among them (32 in all), or all 32 to `each`
 * (so that each queue's claims stay as large as one queue's).
 */
export type DrainSlots = 'split' | 'each';

/** The queues of a drain, with the worker's slots given as `slots` says. */
function drainQueues(queueNames: readonly string[], slots: DrainSlots = 'split', shards?: number): QueueOptions[] {
  const workerConcurrency = slots === 'each' ? WORKER_SLOTS : Math.max(1, Math.floor(WORKER_SLOTS / queueNames.length));
  return queueNames.map((name) => ({ name, workerConcurrency, ...(shards && { shards }) }));
}

/** W1's queue: producers only. */
export const W1_QUEUE = 'w1';

/**
 * W1 on booted producers (`bootModule(…, false, [{ name: W1_QUEUE }])`, one per entry node, the callers dealt among
 * them): `calls` enqueue calls from 16 concurrent callers over a tenth as many deduplication keys (each key accepted
 * once, the other calls refused as duplicates).
 */
export async function enqueueStorm(
  producers: ReadonlyArray<Awaited<ReturnType<typeof bootModule>>>,
  calls: number,
  meter: CpuMeter,
): Promise<Measured> {
  const keys = Math.max(1, Math.floor(calls / 10));
  let next = 0;
  const stop = meter();
  const workerBefore = process.cpuUsage();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: W1_CALLERS }, async (_, caller) => {
      const producer = producers[caller % producers.length];
      while (next < calls) {
        const call = next++;
        await producer.queues
          .enqueue(W1_QUEUE, producer.tasks.run, [], { deduplicationId: `k${call % keys}` })
          .catch(() => undefined);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return { count: calls, seconds, workerCpuSeconds: cpuSeconds(workerBefore), serverCpuSeconds: stop() };
}

/**
 * Before W1 is measured: `calls` enqueue calls of keys of their own (`warm-<n>`, each accepted) from the 16 callers,
 * so that every connection W1 uses is open when it starts, as in a running application: each producer's pool
 * connections and, on Citus, each node's connections to the queue's node. A cold start cost the queue's node about
 * 1.5 times the CPU per call of a warm one in a 2,000-call run (docs/citus.md, "W1 on Citus").
 */
export async function warmUp(
  producers: ReadonlyArray<Awaited<ReturnType<typeof bootModule>>>,
  calls: number,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: W1_CALLERS }, async (_, caller) => {
      const producer = producers[caller % producers.length];
      while (next < calls) {
        const call = next++;
        await producer.queues.enqueue(W1_QUEUE, producer.tasks.run, [], { deduplicationId: `warm-${call}` });
      }
    }),
  );
}

/** W2's prefill: `jobs` no-op workflows enqueued in batches, spread equally over `queueNames`. Not measured. */
export async function prefill(
  database: BenchDatabase,
  schema: string,
  queueNames: readonly string[],
  jobs: number,
  shards?: number,
): Promise<void> {
  const producer = await bootModule(database, schema, false, drainQueues(queueNames, 'split', shards));
  try {
    for (const [index, queueName] of queueNames.entries()) {
      const share = Math.floor(jobs / queueNames.length) + (index < jobs % queueNames.length ? 1 : 0);
      for (let done = 0; done < share; done += PREFILL_BATCH) {
        const batch = Math.min(PREFILL_BATCH, share - done);
        await producer.queues.enqueueMany(
          queueName,
          producer.tasks.run,
          Array.from({ length: batch }, () => ({ args: [] })),
        );
      }
    }
  } finally {
    await producer.app.close();
  }
}

/**
 * Where a drain's workers connect (each a module instance in this process): `url`, draining `queueNames` (indexes
 * into the drain's queues) with `slotsPerQueue` slots each. Without them, one worker on the database's URL drains
 * every queue, its slots as `slots` says.
 */
export interface DrainEntry {
  url: string;
  queueIndexes: readonly number[];
  slotsPerQueue: number;
}

/**
 * W2's drain of a prefilled schema: one worker (32 slots shared by the queues, or 32 for each), or one per entry
 * (`entries`), boots and runs the jobs; measured from the first job's start until every queue's own count shows them
 * all succeeded (a count across queues would ask every shard on Citus, and its connections would be charged to the
 * jobs).
 */
export async function drain(
  database: BenchDatabase,
  schema: string,
  queueNames: readonly string[],
  jobs: number,
  meter: CpuMeter,
  slots: DrainSlots = 'split',
  shards?: number,
  entries?: readonly DrainEntry[],
): Promise<Measured> {
  const clock: { started?: { at: number; worker: NodeJS.CpuUsage; stop: () => number[] } } = {};
  bodiesRun = 0;
  const profiler = drainProfiler(schema);
  onFirstJob = () => {
    profiler.start();
    clock.started = { at: performance.now(), worker: process.cpuUsage(), stop: meter() };
  };
  const workers: Array<Awaited<ReturnType<typeof bootModule>>> = [];
  /** The worker that declares each queue, which asks for its count. */
  const counters = new Map<string, Awaited<ReturnType<typeof bootModule>>>();
  try {
    if (!entries) workers.push(await bootModule(database, schema, true, drainQueues(queueNames, slots, shards)));
    for (const name of entries ? [] : queueNames) counters.set(name, workers[0]);
    for (const entry of entries ?? []) {
      const queues = entry.queueIndexes.map((index) => ({
        name: queueNames[index],
        workerConcurrency: entry.slotsPerQueue,
        ...(shards && { shards }),
      }));
      const worker = await bootModule({ ...database, url: entry.url }, schema, true, queues);
      workers.push(worker);
      for (const queue of queues) counters.set(queue.name, worker);
    }
    const deadline = Date.now() + DRAIN_TIMEOUT_MS;
    const succeeded = async (queueName: string) =>
      (await counters.get(queueName)!.queues.countByStatus(queueName))[queueName]?.SUCCESS ?? 0;
    for (;;) {
      // NOTE: counting in the database only once every body ran here keeps the count's statements (with shards, one
      // per stored name on every node) out of the measured CPU.
      const finished =
        bodiesRun < jobs ? 0 : (await Promise.all(queueNames.map(succeeded))).reduce((sum, count) => sum + count, 0);
      const { started } = clock;
      if (finished >= jobs && started) {
        return {
          count: jobs,
          seconds: (performance.now() - started.at) / 1000,
          workerCpuSeconds: cpuSeconds(started.worker),
          serverCpuSeconds: started.stop(),
        };
      }
      if (Date.now() > deadline) {
        throw new Error(
          `drain of ${schema}: ${bodiesRun} bodies run, ${finished} of ${jobs} jobs recorded after 10 minutes`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    onFirstJob = undefined;
    await profiler.stop();
    for (const worker of workers) await worker.app.close();
  }
}

function cpuSeconds(before: NodeJS.CpuUsage): number {
  const spent = process.cpuUsage(before);
  return (spent.user + spent.system) / 1e6;
}

/** Drops a measurement's schema (on Citus, with its shards on every node). */
export async function dropSchema(database: BenchDatabase, schema: string): Promise<void> {
  const client = new Client({ connectionString: database.url });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

/**
 * `count` queue names for `cluster`, the i-th held by worker node i modulo the nodes (so two queues are on two
 * nodes, four on four, or two per node on two). Placement follows the queue's hash and the co-location group, the
 * same for every schema the module distributes, so it is looked up once, on a schema of its own.
 */
export async function queuesSpreadOver(cluster: CitusCluster, count: number): Promise<string[]> {
  const schema = 'bench_placement';
  const first = await bootModule({ url: cluster.url, distribution: 'citus' }, schema, false, [{ name: 'p0' }]);
  await first.app.close();
  const nodes = cluster.workers.length;
  const names: string[] = [];
  for (let n = 0; n < 1024 && names.length < count; n++) {
    const name = `spread-${n}`;
    if ((await cluster.workerIndexFor(`${schema}.workflow_queue`, name)) === names.length % nodes) names.push(name);
  }
  if (names.length < count) throw new Error(`no ${count} queue names spread over ${nodes} worker nodes`);
  return names;
}

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length / 2;
  return Number.isInteger(middle) ? (sorted[middle - 1] + sorted[middle]) / 2 : sorted[Math.floor(middle)];
}
