/*
 * node -r ./test/support/swc-register.js bench/citus/coordinator-cpu.ts: the Citus coordinator's CPU per enqueue call
 * and per drained job, on a cluster of its own (test/support/citus-cluster.ts). The CPU is the coordinator's
 * postmaster's processes' (live, and reaped ones from the postmaster's cutime/cstime), from /proc, in ticks of 10 ms:
 * - 2,000 lone enqueue calls, one after another;
 * - 4,000 calls from 16 concurrent callers (the enqueue batcher combines them);
 * - 40 `enqueueMany` of 100 rows;
 * - then all of them drained (no-op workflows, one worker process, workerConcurrency 8), the queue paused while the
 *   consumer boots: the CPU is counted from its resume to the last job's archive, the polling for it included (one
 *   connection for the drain: a connection per poll cost the coordinator 36 ms of CPU per second, charged to the jobs);
 * - 1,000 workflows of two steps each (two checkpoints), drained the same way;
 * - 2,000 no-op workflows with a deduplication key kept for a window (each outcome writes a key record and asks
 *   whether a follow-up waits for the key), drained the same way;
 * - 2,000 no-op workflows in a queue with a global concurrency of 8 (the claim locks the queue's row and counts),
 *   drained the same way.
 * BENCH_ONLY=drain,steps,window,limited runs only those drains (the enqueues still run, as the drain's backlog).
 * BENCH_CONSUMER_NODES=coordinator,queue,other (any of them, in any order) runs instead, after the enqueues above and
 * `BENCH_ROUNDS` times (default 2), a drain of 4,000 no-op jobs per listed node with the consumer connected to it:
 * the coordinator, the worker node holding the queue, the other worker node (an instance on a worker node: docs/
 * citus.md, "Worker nodes"); each drain prints the CPU per job of every node, interleaved round by round.
 * With CITUS_PGSS=1, pg_stat_statements on the coordinator prints the drain's statements by planning + execution time.
 * Needs `npm run build`, the Debian postgresql-15 package and Citus. About a minute.
 */
import 'reflect-metadata';
import { Client } from 'pg';
import { startCitusCluster } from '../../test/support/citus-cluster';
import { postmasterCpuTicks, postmasterPid } from './server-processes';
import { startQueueApp } from '../../test/support/queue-app';
import { RecordingTasks } from '../../test/fixtures/recording-tasks';
import { Injectable } from '@nestjs/common';
import { Workflow, runStep } from 'nest-dedup-queue';

/** A workflow of two steps, each a checkpoint. */
@Injectable()
class TwoSteps {
  @Workflow()
  async run(): Promise<number> {
    const first = await runStep('first', () => 1);
    return runStep('second', () => first + 1);
  }
}

const LONE = 2000;
const CONCURRENT = 4000;
const CALLERS = 16;
const MANY = 4000;
const ROWS_PER_MANY = 100;
const STEP_JOBS = 1000;
const WINDOW_JOBS = 2000;
const LIMITED_JOBS = 2000;
const CONSUMER_JOBS = 4000;

async function main(): Promise<void> {
  const cluster = await startCitusCluster();
  process.env.DATABASE_URL = cluster.url;
  try {
    const coordinator = cluster.coordinator;
    if (process.env.CITUS_PGSS) {
      await coordinator.query('ALTER SYSTEM SET shared_preload_libraries = citus, pg_stat_statements');
      await coordinator.restart('fast');
      await coordinator.query('CREATE EXTENSION pg_stat_statements');
      await coordinator.query('ALTER SYSTEM SET pg_stat_statements.track_planning = on');
      await coordinator.query('SELECT pg_reload_conf()');
    }
    const [{ dir }] = await coordinator.query<{ dir: string }>(`SELECT current_setting('data_directory') AS dir`);
    const postmaster = postmasterPid(dir);
    const options = { connection: { url: cluster.url }, distribution: 'citus' as const, schema: 'bench' };
    const queues = [
      { name: 'work', workerConcurrency: 8 },
      { name: 'steps', workerConcurrency: 8 },
      { name: 'window', workerConcurrency: 8 },
      { name: 'limited', workerConcurrency: 8, concurrency: 8 },
    ];
    const providers = [RecordingTasks, TwoSteps];
    const perUnit = async (units: number, work: () => Promise<unknown>) => {
      const before = postmasterCpuTicks(postmaster);
      await work();
      return Math.round(((postmasterCpuTicks(postmaster) - before) * 10_000) / units);
    };

    /** Pauses `queue` by its flag in the table. */
    const pause = (queue: string) =>
      coordinator.query(`UPDATE bench.queues SET paused = true WHERE queue_name = $1`, [queue]);

    const producer = await startQueueApp({ ...options, queues, worker: false }, providers);
    const { nothing } = producer.get(RecordingTasks);
    for (let i = 0; i < 200; i++) await producer.queues.enqueue('work', nothing, []);
    const lone = await perUnit(LONE, async () => {
      for (let i = 0; i < LONE; i++) await producer.queues.enqueue('work', nothing, []);
    });
    const concurrent = await perUnit(CONCURRENT, () =>
      Promise.all(
        Array.from({ length: CALLERS }, async () => {
          for (let i = 0; i < CONCURRENT / CALLERS; i++) await producer.queues.enqueue('work', nothing, []);
        }),
      ),
    );
    const many = await perUnit(MANY, async () => {
      for (let i = 0; i < MANY / ROWS_PER_MANY; i++) {
        await producer.queues.enqueueMany(
          'work',
          nothing,
          Array.from({ length: ROWS_PER_MANY }, () => ({ args: [] })),
        );
      }
    });
    await pause('work');
    await producer.close();

    if (process.env.CITUS_PGSS) await coordinator.query('SELECT pg_stat_statements_reset()');
    /**
     * Drains `jobs` of `queue`, paused by the app that enqueued them: a consumer boots (not measured), then the CPU is
     * measured from the queue's resume until its last job is in the history (the consumer's boot and close are not).
     */
    const drained = async (queue: string, jobs: number, consumerUrl = cluster.url, meters = [postmaster]) => {
      const consumer = await startQueueApp({ ...options, connection: { url: consumerUrl }, queues }, providers);
      const poll = new Client({ connectionString: cluster.url });
      const waker = new Client({ connectionString: consumerUrl });
      await poll.connect();
      await waker.connect();
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const {
        rows: [{ n: archived }],
      } = await poll.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM bench.workflow_history WHERE queue_name = $1`,
        [queue],
      );
      const started = Date.now();
      const before = meters.map((pid) => postmasterCpuTicks(pid));
      const us = await perUnit(jobs, async () => {
        await poll.query(`UPDATE bench.queues SET paused = false WHERE queue_name = $1`, [queue]);
        await waker.query(`SELECT pg_notify('dedup_queue_control:bench', $1), pg_notify('dedup_queue:bench', $1)`, [
          queue,
        ]);
        for (;;) {
          const {
            rows: [{ n }],
          } = await poll.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM bench.workflow_history WHERE queue_name = $1`,
            [queue],
          );
          if (n >= archived + jobs) break;
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      });
      const perNode = meters.map((pid, i) => Math.round(((postmasterCpuTicks(pid) - before[i]) * 10_000) / jobs));
      const seconds = (Date.now() - started) / 1000;
      await poll.end();
      await waker.end();
      await consumer.close();
      return meters.length > 1
        ? `${perNode.join(' / ')} µs/job (${Math.round(jobs / seconds)} jobs/s)`
        : `${us} µs/job (${Math.round(jobs / seconds)} jobs/s)`;
    };
    const consumerNodes = process.env.BENCH_CONSUMER_NODES?.split(',');
    if (consumerNodes) {
      const queueNode = await cluster.workerIndexFor('bench.workflow_queue', 'work');
      const urls: Record<string, string> = {
        coordinator: cluster.url,
        queue: cluster.workerUrls[queueNode],
        other: cluster.workerUrls[1 - queueNode],
      };
      const meters = [];
      for (const node of [cluster.coordinator, cluster.workers[queueNode], cluster.workers[1 - queueNode]]) {
        const [{ dir: nodeDir }] = await node.query<{ dir: string }>(`SELECT current_setting('data_directory') AS dir`);
        meters.push(postmasterPid(nodeDir));
      }
      process.stdout.write(`drain of ${CONSUMER_JOBS} jobs, CPU per job: coordinator / queue's node / other node\n`);
      await drained('work', 200 + LONE + CONCURRENT + MANY);
      for (let round = 1; round <= Number(process.env.BENCH_ROUNDS ?? 2); round++) {
        for (const node of consumerNodes) {
          const enqueuer = await startQueueApp({ ...options, queues, worker: false }, providers);
          for (let i = 0; i < CONSUMER_JOBS / ROWS_PER_MANY; i++) {
            await enqueuer.queues.enqueueMany(
              'work',
              enqueuer.get(RecordingTasks).nothing,
              Array.from({ length: ROWS_PER_MANY }, () => ({ args: [] })),
            );
          }
          await pause('work');
          await enqueuer.close();
          const result = await drained('work', CONSUMER_JOBS, urls[node], meters);
          process.stdout.write(`round ${round}, consumer on ${node}: ${result}\n`);
        }
      }
      return;
    }
    const only = process.env.BENCH_ONLY?.split(',');
    const runs = (name: string) => !only || only.includes(name);
    const drain = runs('drain') ? await drained('work', 200 + LONE + CONCURRENT + MANY) : 'skipped';
    let steps = 'skipped';
    if (runs('steps')) {
      const enqueuer = await startQueueApp({ ...options, queues, worker: false }, providers);
      const { run } = enqueuer.get(TwoSteps);
      for (let i = 0; i < STEP_JOBS / ROWS_PER_MANY; i++) {
        await enqueuer.queues.enqueueMany(
          'steps',
          run,
          Array.from({ length: ROWS_PER_MANY }, () => ({ args: [] })),
        );
      }
      await pause('steps');
      await enqueuer.close();
      steps = await drained('steps', STEP_JOBS);
    }
    let window = 'skipped';
    if (runs('window')) {
      const enqueuer = await startQueueApp({ ...options, queues, worker: false }, providers);
      const { nothing: none } = enqueuer.get(RecordingTasks);
      for (let i = 0; i < WINDOW_JOBS / ROWS_PER_MANY; i++) {
        await enqueuer.queues.enqueueMany(
          'window',
          none,
          Array.from({ length: ROWS_PER_MANY }, (_, j) => ({
            args: [],
            options: { deduplicationId: `k${i}-${j}`, deduplicationWindowMs: 60_000 },
          })),
        );
      }
      await pause('window');
      await enqueuer.close();
      window = await drained('window', WINDOW_JOBS);
    }
    let limited = 'skipped';
    if (runs('limited')) {
      const enqueuer = await startQueueApp({ ...options, queues, worker: false }, providers);
      const { nothing: none } = enqueuer.get(RecordingTasks);
      for (let i = 0; i < LIMITED_JOBS / ROWS_PER_MANY; i++) {
        await enqueuer.queues.enqueueMany(
          'limited',
          none,
          Array.from({ length: ROWS_PER_MANY }, () => ({ args: [] })),
        );
      }
      await pause('limited');
      await enqueuer.close();
      limited = await drained('limited', LIMITED_JOBS);
    }
    process.stdout.write(
      `coordinator CPU: lone enqueue ${lone} µs/call, ${CALLERS} callers ${concurrent} µs/call, ` +
        `enqueueMany(${ROWS_PER_MANY}) ${many} µs/row, drain ${drain}, steps ${steps}, window ${window}, ` +
        `limited ${limited}\n`,
    );
    if (process.env.CITUS_PGSS) {
      const top = await coordinator.query<{ calls: number; us: number; query: string }>(
        `SELECT calls::int, round((total_exec_time + total_plan_time) * 1000 / calls)::int AS us,
                left(regexp_replace(query, '\\s+', ' ', 'g'), 140) AS query
         FROM pg_stat_statements WHERE calls > 0 ORDER BY total_exec_time + total_plan_time DESC LIMIT 15`,
      );
      for (const row of top) process.stdout.write(`${row.calls}\t${row.us} µs\t${row.query}\n`);
    }
  } finally {
    await cluster.stop();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
