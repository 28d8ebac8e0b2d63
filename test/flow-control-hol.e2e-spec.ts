/**
 * No head-of-line stalls (pg-boss #535, #492): a row at the head of a queue locked by another transaction does not
 * stop the rows behind it from being claimed and run, whatever the queue's limits; a claim that hit the 5 s
 * lock_timeout on the queue-row lock backs off and the queue drains once the lock is gone; unique violations on
 * enqueue (deduplication) never affect claiming. Two real worker processes drain the queues.
 */
import type { Pool, PoolClient } from 'pg';
import { QueueDeduplicatedError, QueueOptions } from 'nest-dedup-queue';
import { FixtureProcess, killFixtures } from './fixtures/child-harness';
import type { FlowTasks } from './fixtures/child-flow-tasks';
import {
  callChild,
  countByStatus,
  outputMark,
  printed,
  release,
  startFlowProducer,
  startFlowWorkers,
} from './fixtures/child-flow-support';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import type { QueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

const POLL_MS = 200;
const QUEUES: QueueOptions[] = [
  { name: 'free', workerConcurrency: 4 },
  { name: 'limited', concurrency: 2, workerConcurrency: 2 },
  { name: 'keyed', partitionConcurrency: 2, workerConcurrency: 4 },
  { name: 'locked-out', concurrency: 2 },
  { name: 'free-during-lock', workerConcurrency: 4 },
];
const WORKERS = ['h1', 'h2'];

describe('no head-of-line stalls', () => {
  const schema = uniqueSchema('flow_hol');
  let pool: Pool;
  let app: QueueApp;
  let tasks: FlowTasks;
  let workers: FixtureProcess[];
  const lockers: PoolClient[] = [];

  beforeAll(async () => {
    pool = testPool();
    ({ app, tasks } = await startFlowProducer(pool, schema, QUEUES));
    // The module's default pool size (10), as an application would have it.
    workers = await startFlowWorkers(schema, WORKERS, QUEUES, { POLL_MS: String(POLL_MS), POOL_SIZE: '10' });
  });

  afterAll(async () => {
    for (const locker of lockers) {
      await locker.query('ROLLBACK').catch(() => undefined);
      locker.release();
    }
    if (pool) await release(pool, schema, '*').catch(() => undefined);
    await killFixtures();
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  /** A connection with an open transaction, rolled back by `unlock` (or in afterAll). */
  async function lockingTransaction(): Promise<{ client: PoolClient; unlock: () => Promise<void> }> {
    const client = await pool.connect();
    lockers.push(client);
    await client.query('BEGIN');
    return {
      client,
      unlock: async () => {
        await client.query('ROLLBACK');
        lockers.splice(lockers.indexOf(client), 1);
        client.release();
      },
    };
  }

  /** What the workers logged about failed claims of `queue` (since `marks`, taken with `outputMarks()`). */
  const claimErrors = (queue: string, marks?: number[]) =>
    workers.flatMap((worker, n) => printed(worker, `Claiming from queue "${queue}" failed`, marks?.[n]));
  const outputMarks = () => workers.map(outputMark);

  /** The workers' statements that have been waiting for a lock for over a second now, by their start. */
  const waitingOnLocks = async (): Promise<Record<string, number>> => {
    const { rows } = await pool.query(
      `SELECT regexp_replace(left(query, 60), '[[:space:]]+', ' ', 'g') AS statement, count(*)::int AS n FROM pg_stat_activity
       WHERE application_name = ANY($1) AND wait_event_type = 'Lock' AND query_start < clock_timestamp() - interval '1 second'
       GROUP BY 1 ORDER BY 1`,
      [WORKERS.map((name) => `flow-${name}`)],
    );
    return Object.fromEntries(rows.map((row) => [row.statement, row.n]));
  };

  it.each([
    ['free', 'without limits'],
    ['limited', 'with concurrency: 2'],
    ['keyed', 'with partitionConcurrency: 2'],
  ])('claims and runs the rows behind a locked head row of a queue %s (%s)', async (queue) => {
    const keyed = queue === 'keyed';
    const marks = outputMarks();
    // All become due together, after the head is locked; the head is first by priority and by age.
    const runAt = new Date(Date.now() + 2500);
    const head = await app.queues.enqueue(queue, tasks.record, ['head', 0], {
      runAt,
      priority: -1,
      ...(keyed && { partitionKey: 'p1' }),
    });
    const behind = [];
    for (let n = 0; n < 10; n++) {
      behind.push(
        await app.queues.enqueue(queue, tasks.record, [`behind-${n}`, 0], {
          runAt,
          ...(keyed && { partitionKey: n % 2 ? 'p1' : 'p2' }),
        }),
      );
    }
    const { client, unlock } = await lockingTransaction();
    try {
      const { rows } = await client.query(
        `SELECT status, not_before > clock_timestamp() AS not_due_yet FROM "${schema}".workflow_queue WHERE workflow_id = $1 FOR UPDATE`,
        [head.workflowId],
      );
      expect(rows).toEqual([{ status: 'ENQUEUED', not_due_yet: true }]);

      const done = await waitFor(async () => (await countByStatus(pool, schema, queue)).SUCCESS === 10, {
        timeoutMs: 6_000,
        intervalMs: 50,
        what: `the 10 rows behind the locked head of ${queue} to run`,
      }).then(
        () => 10,
        async () => (await countByStatus(pool, schema, queue)).SUCCESS ?? 0,
      );
      expect({
        succeededBehindLockedHead: done,
        claimErrors: claimErrors(queue, marks),
        workerStatementsWaitingOnLocks: await waitingOnLocks(),
      }).toEqual({
        succeededBehindLockedHead: 10,
        claimErrors: [],
        workerStatementsWaitingOnLocks: {},
      });
      expect((await head.getStatus()).status).toBe('ENQUEUED');
    } finally {
      await unlock();
    }
    // Unlocked, the head runs too.
    await expect(head.getResult({ timeoutMs: 15_000 })).resolves.toBe('head');
    await Promise.all(behind.map((handle) => handle.getResult({ timeoutMs: 15_000 })));
  });

  let duringLock: { enqueueThroughWorker: string; freeQueue: string } | undefined;

  it('recovers a limited queue whose claims hit the lock_timeout while the queues table was locked', async () => {
    const { client, unlock } = await lockingTransaction();
    let released = false;
    try {
      await client.query(`LOCK TABLE "${schema}".queues IN ACCESS EXCLUSIVE MODE`);
      const lockedAt = Date.now();
      const handles = await Promise.all(
        Array.from({ length: 10 }, (_, n) => app.queues.enqueue('locked-out', tasks.record, [`locked-${n}`, 0])),
      );
      // A worker's claim waits for the queue-row lock, fails after the 5 s lock_timeout, and the worker backs off.
      await waitFor(() => claimErrors('locked-out').some((line) => line.includes('lock timeout')), {
        timeoutMs: 15_000,
        intervalMs: 100,
        what: 'a claim of locked-out to hit the lock timeout',
      });
      const timedOutAfterMs = Date.now() - lockedAt;
      expect(await countByStatus(pool, schema, 'locked-out')).toEqual({ ENQUEUED: 10 });

      // Meanwhile, 5+ s into the lock: can a worker process still enqueue (an INSERT into workflows, which needs
      // no lock on the queues table)? And does a queue without global limits (whose claims never read the queues
      // table) keep running? (The latter is only measured.)
      const enqueued = callChild<string>(workers[0], 'enqueue', 'free-during-lock', 'record', ['through-worker', 0]);
      const enqueueThroughWorker = await Promise.race([
        enqueued.then(
          () => 'completed',
          (error: Error) => `failed: ${error.message}`,
        ),
        new Promise<string>((resolve) => setTimeout(() => resolve('still waiting after 3000 ms'), 3_000).unref()),
      ]);
      const free = await Promise.all(
        Array.from({ length: 3 }, (_, n) => app.queues.enqueue('free-during-lock', tasks.record, [`free-${n}`, 0])),
      );
      const freeDone = await Promise.all(
        free.map((handle) =>
          handle.getResult({ timeoutMs: 2_000 }).then(
            () => 1,
            () => 0,
          ),
        ),
      );
      duringLock = {
        enqueueThroughWorker,
        freeQueue: `${freeDone.reduce<number>((sum, n) => sum + n, 0)}/${free.length} ran`,
      };
      const blocked = await waitingOnLocks();

      await unlock();
      released = true;
      const releasedAt = Date.now();
      await Promise.all(handles.map((handle) => handle.getResult({ timeoutMs: 20_000 })));
      console.log(
        `[flow-control] queues table locked: first claim lock timeout after ${timedOutAfterMs} ms; locked-out drained ` +
          `${Date.now() - releasedAt} ms after the lock was released; during the lock: ${JSON.stringify(duringLock)}; ` +
          `claim errors: ${JSON.stringify(claimErrors('locked-out'))}; worker statements waiting on locks 10 s into the lock: ` +
          JSON.stringify(blocked),
      );
      expect(await countByStatus(pool, schema, 'locked-out')).toEqual({ SUCCESS: 10 });
      await Promise.all(free.map((handle) => handle.getResult({ timeoutMs: 20_000 })));
      await enqueued;
    } finally {
      if (!released) await unlock();
    }
  });

  it('lets a worker process enqueue while the queues table is locked (waiting settings re-reads do not take its pool)', () => {
    // Measured in the previous test, 5+ s into the lock. Each worker re-reads the queues table on every polling tick
    // (and on every control notification) without a lock_timeout and without waiting for the previous re-read; the
    // re-reads that pile up behind the lock can take every connection of the worker's pool.
    expect(duringLock?.enqueueThroughWorker).toBe('completed');
  });

  it.each(['free', 'limited'])(
    'keeps claiming in %s while enqueues hit the deduplication unique index',
    async (queue) => {
      const marks = outputMarks();
      const holder = await app.queues.enqueue(queue, tasks.hold, [`holder-${queue}`], {
        deduplicationId: `hot-key-${queue}`,
      });
      await waitFor(async () => (await holder.getStatus()).status === 'PENDING', { what: 'the holder to run' });
      const results = await Promise.all(
        Array.from({ length: 240 }, (_, n) =>
          n % 6 === 0
            ? app.queues
                .enqueue(queue, tasks.record, [`dedup-ok-${queue}-${n}`, 5])
                .then((handle) => handle.getResult({ timeoutMs: 20_000 }))
            : app.queues.enqueue(queue, tasks.record, ['duplicate', 0], { deduplicationId: `hot-key-${queue}` }).then(
                () => 'created a duplicate',
                (error: Error) =>
                  error instanceof QueueDeduplicatedError
                    ? `${error.name} ${error.existingWorkflowId}`
                    : `${error.name}: ${error.message}`,
              ),
        ),
      );
      expect(results.filter((_, n) => n % 6 === 0)).toEqual(
        Array.from({ length: 40 }, (_, m) => `dedup-ok-${queue}-${m * 6}`),
      );
      expect(new Set(results.filter((_, n) => n % 6 !== 0))).toEqual(
        new Set([`QueueDeduplicatedError ${holder.workflowId}`]),
      );

      await release(pool, schema, `holder-${queue}`);
      await expect(holder.getResult({ timeoutMs: 10_000 })).resolves.toBe(`holder-${queue}`);
      const next = await app.queues.enqueue(queue, tasks.record, ['after-holder', 0], {
        deduplicationId: `hot-key-${queue}`,
      });
      await expect(next.getResult({ timeoutMs: 10_000 })).resolves.toBe('after-holder');
      expect(claimErrors(queue, marks)).toEqual([]);
    },
  );
});
