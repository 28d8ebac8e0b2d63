/**
 * Claiming ahead: a worker whose bodies return within milliseconds claims more than its free slots into a local
 * buffer (up to 32 workflows for a queue of few slots), yet never runs more than `workerConcurrency` bodies at once,
 * runs each workflow once, and holds no buffered workflow behind slots that stop freeing: it gives them back to the
 * queue after a short hold, and at shutdown.
 */
import { Injectable } from '@nestjs/common';
import type { Pool } from 'pg';
import { Workflow } from 'nest-dedup-queue';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';
import { Gate } from './fixtures/recording-tasks';

const WORKER_CONCURRENCY = 4;
/** What a quick queue of few slots claims ahead at most (`AHEAD_ROWS` in the scheduler's `queue.worker.ts`). */
const AHEAD_ROWS = 32;
const EXECUTOR_ID = 'claim-ahead-worker';

@Injectable()
class BurstTasks {
  readonly runs = new Map<string, number>();
  readonly gate = new Gate();
  running = 0;
  maxRunning = 0;

  @Workflow()
  async quick(id: string): Promise<void> {
    this.enter(id);
    await new Promise((resolve) => setImmediate(resolve));
    this.running -= 1;
  }

  /** Holds its slot until the test opens the gate. */
  @Workflow()
  async holdSlot(id: string): Promise<void> {
    this.enter(id);
    try {
      await this.gate.wait();
    } finally {
      this.running -= 1;
    }
  }

  private enter(id: string): void {
    this.runs.set(id, (this.runs.get(id) ?? 0) + 1);
    this.running += 1;
    this.maxRunning = Math.max(this.maxRunning, this.running);
  }
}

describe('claiming ahead of free slots', () => {
  let pool: Pool;
  const schemas: string[] = [];
  const apps: QueueApp[] = [];

  const start = async (schema: string, worker: boolean, executorId = EXECUTOR_ID) => {
    const app = await startQueueApp(
      {
        schema,
        queues: [{ name: 'burst', workerConcurrency: WORKER_CONCURRENCY }],
        worker,
        executorId,
        shutdownGraceMs: 200,
      },
      [BurstTasks],
    );
    apps.push(app);
    return app;
  };
  const enqueue = async (app: QueueApp, workflow: 'quick' | 'holdSlot', ids: string[], priority: number) => {
    const tasks = app.get(BurstTasks);
    await app.queues.enqueueMany(
      'burst',
      tasks[workflow],
      ids.map((id) => ({ args: [id], options: { priority } })),
    );
  };
  const ids = (prefix: string, count: number) => Array.from({ length: count }, (_, i) => `${prefix}${i}`);
  const rowsByStatus = async (schema: string) =>
    (
      await pool.query<{
        id: string;
        status: string;
        executor_id: string | null;
        attempts: number;
        given_back: boolean;
      }>(
        `SELECT inputs->>0 AS id, status, executor_id, attempts, (attempts = 0 AND updated_at > created_at) AS given_back
         FROM "${schema}".workflows`,
      )
    ).rows;

  beforeAll(() => {
    pool = testPool();
  });

  afterAll(async () => {
    for (const app of apps) app.get(BurstTasks).gate.open();
    await Promise.all(apps.map((app) => app.close().catch(() => undefined)));
    for (const schema of schemas) await dropSchema(pool, schema);
    await pool.end();
  });

  it('runs 3,000 quick workflows once each, never more than workerConcurrency bodies at once', async () => {
    const schema = uniqueSchema('ahead_burst');
    schemas.push(schema);
    const producer = await start(schema, false);
    await enqueue(producer, 'quick', ids('q', 3000), 0);
    const worker = await start(schema, true);
    const tasks = worker.get(BurstTasks);
    let maxPending = 0;
    await waitFor(
      async () => {
        const rows = await rowsByStatus(schema);
        maxPending = Math.max(maxPending, rows.filter((row) => row.status === 'PENDING').length);
        return rows.every((row) => row.status === 'SUCCESS');
      },
      { what: 'all 3,000 done', timeoutMs: 60_000 },
    );
    expect(tasks.runs.size).toBe(3000);
    expect([...tasks.runs.values()].every((count) => count === 1)).toBe(true);
    expect(tasks.maxRunning).toBeLessThanOrEqual(WORKER_CONCURRENCY);
    expect(tasks.maxRunning).toBe(WORKER_CONCURRENCY);
    // A queue of few slots claims ahead up to 32 workflows, not only `workerConcurrency` more: more than twice its
    // slots were PENDING under the worker at once, and never more than its slots and those 32, with the outcomes of
    // two writes in flight.
    expect(maxPending).toBeGreaterThan(2 * WORKER_CONCURRENCY);
    expect(maxPending).toBeLessThanOrEqual(3 * (WORKER_CONCURRENCY + AHEAD_ROWS));
  });

  it('gives buffered workflows back when every slot is held, and at shutdown; they run once, later', async () => {
    const schema = uniqueSchema('ahead_held');
    schemas.push(schema);
    const producer = await start(schema, false, 'claim-ahead-producer');
    await enqueue(producer, 'quick', ids('q', 2000), 0);
    await enqueue(producer, 'holdSlot', ids('h', WORKER_CONCURRENCY), 1);
    await enqueue(producer, 'quick', ids('t', 200), 2);
    const worker = await start(schema, true);
    const tasks = worker.get(BurstTasks);
    const heldIds = ids('h', WORKER_CONCURRENCY);
    await waitFor(() => tasks.running === WORKER_CONCURRENCY && heldIds.every((id) => tasks.runs.has(id)), {
      what: 'every slot held by holdSlot',
      timeoutMs: 60_000,
    });

    // Within the hold (250 ms) and a margin, nothing but the held slots is PENDING under the worker.
    await waitFor(
      async () => (await rowsByStatus(schema)).filter((row) => row.status === 'PENDING').length === WORKER_CONCURRENCY,
      { what: 'only the held slots PENDING', timeoutMs: 2000 },
    );
    const held = await rowsByStatus(schema);
    expect(held.filter((row) => row.status === 'PENDING').every((row) => row.executor_id === EXECUTOR_ID)).toBe(true);
    // Concurrent claims skip each other's locked rows, so a few of the first batch may have been claimed after the
    // holders and given back behind the held slots: they wait with the tail.
    const waiting = held.filter((row) => row.status === 'ENQUEUED');
    const ran = (prefix: string) => [...tasks.runs.keys()].filter((id) => id.startsWith(prefix)).length;
    const tailRan = ran('t');
    const firstRan = ran('q');
    expect(waiting).toHaveLength(2000 - firstRan + (200 - tailRan));
    expect(held.filter((row) => row.status === 'SUCCESS')).toHaveLength(firstRan + tailRan);
    expect(waiting.every((row) => row.attempts === 0 && row.executor_id === null)).toBe(true);
    console.log(
      `[claim-ahead] slots held: ${waiting.filter((row) => row.given_back).length} of ${waiting.length} waiting ` +
        `were given back (claimed ahead, then returned); ${tailRan} of the tail ran before the slots were held`,
    );

    // Shutdown: the held bodies outlive the grace period and are left for recovery; nothing else was held.
    await worker.close();
    const afterClose = await rowsByStatus(schema);
    expect(afterClose.filter((row) => row.status === 'PENDING').every((row) => row.id.startsWith('h'))).toBe(true);
    expect(afterClose.filter((row) => row.status === 'ENQUEUED')).toHaveLength(waiting.length);
    tasks.gate.open();

    const next = await start(schema, true, 'claim-ahead-next');
    const nextTasks = next.get(BurstTasks);
    const quick = [...ids('q', 2000), ...ids('t', 200)];
    await waitFor(() => quick.every((id) => tasks.runs.has(id) || nextTasks.runs.has(id)), {
      what: 'every waiting workflow ran',
      timeoutMs: 30_000,
    });
    expect(quick.every((id) => (tasks.runs.get(id) ?? 0) + (nextTasks.runs.get(id) ?? 0) === 1)).toBe(true);
  });
});
