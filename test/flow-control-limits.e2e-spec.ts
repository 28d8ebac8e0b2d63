/**
 * Flow control across OS processes, checked by measurement: a global `concurrency`, a per-process
 * `workerConcurrency` and a per-key `partitionConcurrency` are reached and never exceeded while three worker
 * processes drain 300 workflows each, and a partition with 5 items is not starved behind one with 2,000.
 *
 * Each limit is measured three ways (see child-flow-support.ts): from the bodies' own start/end records, from the
 * queue's `started_at`/`completed_at` columns, and from the PENDING periods a trigger records on status changes.
 */
import type { Pool } from 'pg';
import type { QueueOptions } from 'nest-dedup-queue';
import { killFixtures } from './fixtures/child-harness';
import type { FlowTasks } from './fixtures/child-flow-tasks';
import {
  bodyIntervals,
  columnIntervals,
  countByStatus,
  maxOverlap,
  Interval,
  MS,
  maxOverlapBy,
  pendingIntervals,
  startFlowProducer,
  startFlowWorkers,
} from './fixtures/child-flow-support';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import type { QueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

const QUEUES: QueueOptions[] = [
  { name: 'global', concurrency: 5, workerConcurrency: 4 },
  { name: 'per-worker', workerConcurrency: 3 },
  { name: 'per-key', partitionConcurrency: 2, workerConcurrency: 8 },
  { name: 'fair', partitionConcurrency: 5, workerConcurrency: 5 },
];
const WORKERS = ['w1', 'w2', 'w3'];
const COUNT = 300;
const BODY_MS = 30;
const KEYS = Array.from({ length: 10 }, (_, n) => `key-${n}`);

describe('flow control limits across 3 worker processes', () => {
  const schema = uniqueSchema('flow_limits');
  let pool: Pool;
  let app: QueueApp;
  let tasks: FlowTasks;

  beforeAll(async () => {
    pool = testPool();
    // The test's own process only enqueues; it also migrates the schema before the tables and trigger are added.
    ({ app, tasks } = await startFlowProducer(pool, schema, QUEUES));
    await startFlowWorkers(schema, WORKERS, QUEUES);
  });

  afterAll(async () => {
    await killFixtures();
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  /**
   * Enqueues `count` workflows of a paused queue, 50 calls at a time, then resumes it: the backlog is all there when
   * the workers start (enqueues slower than the workers would otherwise never let the limits bind).
   */
  async function enqueueBacklog(
    queue: string,
    count: number,
    enqueueOne: (n: number) => Promise<unknown>,
  ): Promise<void> {
    await app.queues.pauseQueue(queue);
    await enqueueAll(count, enqueueOne);
    await app.queues.resumeQueue(queue);
  }

  /** Enqueues `count` workflows, 50 calls at a time, in index order within each batch. */
  async function enqueueAll(count: number, enqueueOne: (n: number) => Promise<unknown>): Promise<void> {
    for (let first = 0; first < count; first += 50) {
      await Promise.all(Array.from({ length: Math.min(50, count - first) }, (_, n) => enqueueOne(first + n)));
    }
  }

  async function drained(queue: string, count: number): Promise<void> {
    await waitFor(async () => (await countByStatus(pool, schema, queue)).SUCCESS === count, {
      timeoutMs: 45_000,
      intervalMs: 100,
      what: `${count} ${queue} workflows to succeed`,
    });
  }

  async function measure(queue: string) {
    const body = await bodyIntervals(pool, schema, queue);
    const columns = await columnIntervals(pool, schema, queue);
    const pending = await pendingIntervals(pool, schema, queue);
    expect(body).toHaveLength(COUNT);
    expect(columns).toHaveLength(COUNT);
    expect(pending).toHaveLength(COUNT);
    for (const list of [body, columns, pending])
      expect(list.every((i) => Number.isFinite(i.end) && i.end >= i.start)).toBe(true);
    return { body, columns, pending };
  }

  /** How much earlier than the claiming UPDATE (trigger time) each row's `started_at` is, in ms: max and median. */
  function startedAtLag(columns: Interval[], pending: Interval[]): { maxMs: number; medianMs: number } {
    const claimedAt = new Map(pending.map((i) => [i.workflowId, i.start]));
    const lags = columns.map((i) => ((claimedAt.get(i.workflowId) as number) - i.start) / MS).sort((a, b) => a - b);
    return {
      maxMs: Math.round(lags[lags.length - 1] * 10) / 10,
      medianMs: Math.round(lags[lags.length >> 1] * 10) / 10,
    };
  }

  const recorded: Record<string, { columns: Interval[]; pending: Interval[] }> = {};

  it('runs at most concurrency: 5 at once across 3 processes (workerConcurrency 4 each), and reaches 5', async () => {
    await enqueueBacklog('global', COUNT, (n) => app.queues.enqueue('global', tasks.record, [`g${n}`, BODY_MS]));
    await drained('global', COUNT);

    const { body, columns, pending } = await measure('global');
    recorded.global = { columns, pending };
    const measured = {
      body: maxOverlap(body),
      pending: maxOverlap(pending),
      columns: maxOverlap(columns),
      pendingPerExecutor: maxOverlapBy(pending, (i) => i.executorId),
      startedAtBeforeClaim: startedAtLag(columns, pending),
    };
    console.log(
      `[flow-control] concurrency 5, 3 processes, ${COUNT} x ${BODY_MS} ms: max running at once`,
      JSON.stringify(measured),
    );

    // Every process took part, none above its own workerConcurrency.
    expect(Object.keys(measured.pendingPerExecutor)).toEqual(WORKERS);
    for (const max of Object.values(measured.pendingPerExecutor)) expect(max).toBeLessThanOrEqual(4);
    // The global limit is reached and never exceeded, by the bodies and by the rows' PENDING periods.
    expect(measured.body).toBe(5);
    expect(measured.pending).toBe(5);
  });

  it('records started_at..completed_at periods that never overlap more than concurrency: 5 (started_at is the claim time)', () => {
    // completed_at is set by the statement that frees the slot; started_at should be the moment of the claim. If
    // started_at is the claiming transaction's start (now()), which may precede its wait for the queue-row lock,
    // a row's recorded start lies before the end of the row whose slot it took and the periods overlap more.
    const { columns, pending } = recorded.global;
    expect({
      maxOverlapOfStartedAtToCompletedAt: maxOverlap(columns),
      startedAtBeforeClaim: startedAtLag(columns, pending),
    }).toEqual({
      maxOverlapOfStartedAtToCompletedAt: 5,
      startedAtBeforeClaim: expect.objectContaining({ maxMs: expect.any(Number) }),
    });
  });

  it('runs at most workerConcurrency: 3 at once in each of 3 processes, and each reaches 3', async () => {
    await enqueueBacklog('per-worker', COUNT, (n) =>
      app.queues.enqueue('per-worker', tasks.record, [`p${n}`, BODY_MS]),
    );
    await drained('per-worker', COUNT);

    const { body, columns, pending } = await measure('per-worker');
    const measured = {
      body: maxOverlapBy(body, (i) => i.executorId),
      columns: maxOverlapBy(columns, (i) => i.executorId),
      pending: maxOverlapBy(pending, (i) => i.executorId),
      all: maxOverlap(pending),
    };
    console.log(
      `[flow-control] workerConcurrency 3, 3 processes, ${COUNT} x ${BODY_MS} ms: max running at once per process`,
      JSON.stringify(measured),
    );

    const expected = Object.fromEntries(WORKERS.map((worker) => [worker, 3]));
    expect(measured.body).toEqual(expected);
    expect(measured.pending).toEqual(expected);
    expect(measured.columns).toEqual(expected);
    expect(measured.all).toBeLessThanOrEqual(9);
  });

  it('runs at most partitionConcurrency: 2 at once per partition key across 3 processes, and each key reaches 2', async () => {
    await enqueueBacklog('per-key', COUNT, (n) =>
      app.queues.enqueue('per-key', tasks.record, [`k${n}`, BODY_MS], { partitionKey: KEYS[n % KEYS.length] }),
    );
    await drained('per-key', COUNT);

    const { body, columns, pending } = await measure('per-key');
    recorded.perKey = { columns, pending };
    const measured = {
      body: maxOverlapBy(body, (i) => i.partitionKey),
      pending: maxOverlapBy(pending, (i) => i.partitionKey),
      columns: maxOverlapBy(columns, (i) => i.partitionKey),
      all: maxOverlap(pending),
      executors: Object.keys(maxOverlapBy(pending, (i) => i.executorId)),
      startedAtBeforeClaim: startedAtLag(columns, pending),
    };
    console.log(
      `[flow-control] partitionConcurrency 2, 10 keys, 3 processes, ${COUNT} x ${BODY_MS} ms: max running at once per key`,
      JSON.stringify(measured),
    );

    const expected = Object.fromEntries(KEYS.map((key) => [key, 2]));
    expect(measured.body).toEqual(expected);
    expect(measured.pending).toEqual(expected);
    expect(measured.executors).toEqual(WORKERS);
  });

  it('records started_at..completed_at periods that never overlap more than partitionConcurrency: 2 per key', () => {
    const { columns } = recorded.perKey;
    expect({ maxOverlapOfStartedAtToCompletedAtPerKey: maxOverlapBy(columns, (i) => i.partitionKey) }).toEqual({
      maxOverlapOfStartedAtToCompletedAtPerKey: Object.fromEntries(KEYS.map((key) => [key, 2])),
    });
  });

  it('serves a partition with 5 items long before a 2,000-item backlog enqueued ahead of it drains', async () => {
    // Paused while enqueueing (a partitioned queue checks its pause flag in the claiming transaction), so that all
    // 2,000 items of A are queued ahead of B's 5 when the workers start.
    await app.queues.pauseQueue('fair');
    await enqueueAll(2000, (n) => app.queues.enqueue('fair', tasks.noop, [`a${n}`], { partitionKey: 'A' }));
    await enqueueAll(5, (n) => app.queues.enqueue('fair', tasks.noop, [`b${n}`], { partitionKey: 'B' }));
    expect(await countByStatus(pool, schema, 'fair')).toEqual({ ENQUEUED: 2005 });

    const finished = async () =>
      (
        await pool.query(
          `SELECT count(*) FILTER (WHERE partition_key = 'A')::int AS a, count(*) FILTER (WHERE partition_key = 'B')::int AS b
           FROM "${schema}".workflows WHERE queue_name = 'fair' AND status = 'SUCCESS'`,
        )
      ).rows[0] as { a: number; b: number };
    const resumedAt = Date.now();
    await app.queues.resumeQueue('fair');
    // Until A's 100th completion and B's last (or A's 200th, should B be starved).
    await waitFor(
      async () => {
        const { a, b } = await finished();
        return a >= 100 && (b === 5 || a >= 200);
      },
      { timeoutMs: 45_000, intervalMs: 50, what: "A's 100th and B's last completion" },
    );
    const elapsedMs = Date.now() - resumedAt;
    // The rest of A is not needed: stop it (the workers stay busy otherwise).
    await app.queues.pauseQueue('fair');

    const { rows } = await pool.query(
      `SELECT partition_key, row_number() OVER (ORDER BY completed_at, seq)::int AS position
       FROM "${schema}".workflows WHERE queue_name = 'fair' AND status = 'SUCCESS' ORDER BY completed_at, seq`,
    );
    const positionsOf = (key: string) =>
      rows.filter((row) => row.partition_key === key).map((row) => row.position as number);
    const a = positionsOf('A');
    const b = positionsOf('B');
    const aBeforeLastB = a.filter((position) => position < Math.max(...b)).length;
    console.log(
      `[flow-control] fairness: 2,000 A then 5 B, partitionConcurrency 5, 3 processes: B's completions at positions ` +
        `${b.join(', ')} (${aBeforeLastB} A completed before B's last); ${a.length} A done ${elapsedMs} ms after resume`,
    );
    expect(b).toHaveLength(5);
    // B's last completion comes before A's 100th.
    expect(aBeforeLastB).toBeLessThan(100);
    // Neither partition ran more than its limit meanwhile.
    const perKey = maxOverlapBy(await pendingIntervals(pool, schema, 'fair'), (i) => i.partitionKey);
    expect(perKey.A).toBeLessThanOrEqual(5);
    expect(perKey.B).toBeLessThanOrEqual(5);
  });
});
