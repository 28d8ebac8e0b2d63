/**
 * Rate limits across OS processes, checked by measurement: with two worker processes, the starts recorded in the
 * queue's `started_at` never exceed the limit in any sliding window of the period (every window that begins at a
 * start), queue-wide and per partition, and the limit is reached.
 */
import type { Pool } from 'pg';
import type { QueueOptions } from 'nest-dedup-queue';
import { killFixtures } from './fixtures/child-harness';
import type { FlowTasks } from './fixtures/child-flow-tasks';
import {
  Interval,
  MS,
  bodyIntervals,
  columnIntervals,
  countByStatus,
  maxStartsPerWindow,
  pendingIntervals,
  startFlowProducer,
  startFlowWorkers,
} from './fixtures/child-flow-support';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import type { QueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

const PERIOD_MS = 1000;
/** Windows for the claims' own times, logged for information: AFTER triggers fire at the end of the claiming statement. */
const CLAIM_WINDOW_US = (PERIOD_MS - 5) * MS;
const QUEUES: QueueOptions[] = [
  // workerConcurrency 5 and 50 ms bodies, so that one process cannot take a whole window's 10 starts alone.
  { name: 'rate', rateLimit: { limit: 10, periodMs: PERIOD_MS }, workerConcurrency: 5 },
  { name: 'rate-per-key', rateLimit: { limit: 3, periodMs: PERIOD_MS, perPartition: true }, workerConcurrency: 5 },
];
const WORKERS = ['r1', 'r2'];

describe('rate limits across 2 worker processes', () => {
  const schema = uniqueSchema('flow_rate');
  let pool: Pool;
  let app: QueueApp;
  let tasks: FlowTasks;

  beforeAll(async () => {
    pool = testPool();
    ({ app, tasks } = await startFlowProducer(pool, schema, QUEUES));
    await startFlowWorkers(schema, WORKERS, QUEUES);
  });

  afterAll(async () => {
    await killFixtures();
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  const drained = (queue: string, count: number) =>
    waitFor(async () => (await countByStatus(pool, schema, queue)).SUCCESS === count, {
      timeoutMs: 30_000,
      intervalMs: 100,
      what: `${count} ${queue} workflows to succeed`,
    });

  let claims: { startedAt: number[]; claimUpdates: number[]; bodies: number[] };

  it('starts at most 10 per 1000 ms sliding window of started_at across 2 processes, and reaches 10', async () => {
    await Promise.all(Array.from({ length: 40 }, (_, n) => app.queues.enqueue('rate', tasks.record, [`r${n}`, 50])));
    await drained('rate', 40);

    const columns = await columnIntervals(pool, schema, 'rate');
    const pending = await pendingIntervals(pool, schema, 'rate');
    const bodies = await bodyIntervals(pool, schema, 'rate');
    expect(columns).toHaveLength(40);
    expect(pending).toHaveLength(40);
    claims = {
      startedAt: columns.map((i) => i.start),
      claimUpdates: pending.map((i) => i.start),
      bodies: bodies.map((i) => i.start),
    };
    const startsPerExecutor = columns.reduce<Record<string, number>>(
      (counts, i) => ({ ...counts, [String(i.executorId)]: (counts[String(i.executorId)] ?? 0) + 1 }),
      {},
    );
    const measured = {
      maxStartsPerWindowOfStartedAt: maxStartsPerWindow(claims.startedAt, PERIOD_MS * MS),
      maxClaimsPer995msOfClaimUpdate: maxStartsPerWindow(claims.claimUpdates, CLAIM_WINDOW_US),
      maxStartsPerWindowOfBodyStart: maxStartsPerWindow(claims.bodies, PERIOD_MS * MS),
      startedAtBeforeClaimUpdateMs:
        Math.round(
          Math.max(
            ...pending.map((i) => i.start - (columns.find((c) => c.workflowId === i.workflowId) as Interval).start),
          ) / 100,
        ) / 10,
      startsPerExecutor,
      spanMs: Math.round((columns[columns.length - 1].start - columns[0].start) / MS),
    };
    console.log('[flow-control] rate limit 10 / 1000 ms, 2 processes, 40 workflows:', JSON.stringify(measured));

    expect(measured.maxStartsPerWindowOfStartedAt).toBe(10);
    expect(Object.keys(startsPerExecutor).sort()).toEqual(WORKERS);
    // 40 starts at 10 per period: the last start is at least 3 periods after the first.
    expect(measured.spanMs).toBeGreaterThanOrEqual(3 * PERIOD_MS);
  });

  it('starts at most 3 per 1000 ms sliding window per partition key with perPartition, and each key reaches 3', async () => {
    const keys = ['x', 'y', 'z'];
    await Promise.all(
      Array.from({ length: 27 }, (_, n) =>
        app.queues.enqueue('rate-per-key', tasks.record, [`p${n}`, 20], { partitionKey: keys[n % keys.length] }),
      ),
    );
    await drained('rate-per-key', 27);

    const columns = await columnIntervals(pool, schema, 'rate-per-key');
    const pending = await pendingIntervals(pool, schema, 'rate-per-key');
    const perKey = (intervals: Interval[], windowUs = PERIOD_MS * MS) =>
      Object.fromEntries(
        keys.map((key) => [
          key,
          maxStartsPerWindow(
            intervals.filter((i) => i.partitionKey === key).map((i) => i.start),
            windowUs,
          ),
        ]),
      );
    const measured = {
      maxStartsPerWindowPerKey: perKey(columns),
      maxClaimsPer995msOfClaimUpdatePerKey: perKey(pending, CLAIM_WINDOW_US),
      maxStartsPerWindowAllKeys: maxStartsPerWindow(
        columns.map((i) => i.start),
        PERIOD_MS * MS,
      ),
      executors: [...new Set(columns.map((i) => i.executorId))].sort(),
      spanMs: Math.round((columns[columns.length - 1].start - columns[0].start) / MS),
    };
    console.log('[flow-control] rate limit 3 / 1000 ms per key, 3 keys x 9, 2 processes:', JSON.stringify(measured));

    expect(measured.maxStartsPerWindowPerKey).toEqual({ x: 3, y: 3, z: 3 });
    // The keys do not share their limit: more than 3 start in some window across keys.
    expect(measured.maxStartsPerWindowAllKeys).toBeGreaterThan(3);
    expect(measured.spanMs).toBeGreaterThanOrEqual(2 * PERIOD_MS);
  });
});
