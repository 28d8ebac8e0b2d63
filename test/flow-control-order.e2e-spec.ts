/**
 * Order and time: priority (lower first) and FIFO within a priority on a concurrency-1 queue and within a
 * partition; delayed workflows (`delayMs`, `runAt`) start no earlier than their time, by the database's clock, and
 * hold their deduplication ID meanwhile; `reschedule` moves a workflow earlier or later and changes its priority.
 * One worker process (the test's own) is enough here: the order is decided by the claim in Postgres.
 */
import type { Pool } from 'pg';
import { InvalidArgumentError, QueueDeduplicatedError, QueueOptions, WorkflowNotFoundError } from 'nest-dedup-queue';
import { FLOW_OPTIONS, FlowTasks } from './fixtures/child-flow-tasks';
import {
  MS,
  countByStatus,
  createFlowTables,
  dbNow,
  maxOverlap,
  pendingIntervals,
  release,
} from './fixtures/child-flow-support';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

const QUEUES: QueueOptions[] = [
  { name: 'serial', concurrency: 1 },
  { name: 'keyed', partitionConcurrency: 1, workerConcurrency: 4 },
  { name: 'delayed' },
];
const POLL_MS = 100;

describe('priority, FIFO, delays and reschedule', () => {
  const schema = uniqueSchema('flow_order');
  let pool: Pool;
  let app: QueueApp;
  let tasks: FlowTasks;

  beforeAll(async () => {
    pool = testPool();
    // Migrate first (worker-less), add the test tables, then boot the worker that runs the workflows.
    const migrator = await startQueueApp(
      { connection: { url: databaseUrl(), poolSize: 4 }, schema, queues: QUEUES, worker: false },
      [FlowTasks, { provide: FLOW_OPTIONS, useValue: { databaseUrl: databaseUrl(), schema, executorId: 'migrator' } }],
    );
    await migrator.close();
    await createFlowTables(pool, schema);
    app = await startQueueApp(
      {
        connection: { url: databaseUrl(), poolSize: 4 },
        schema,
        queues: QUEUES,
        pollIntervalMs: POLL_MS,
        executorId: 'order',
      },
      [FlowTasks, { provide: FLOW_OPTIONS, useValue: { databaseUrl: databaseUrl(), schema, executorId: 'order' } }],
    );
    tasks = app.get(FlowTasks);
  });

  afterAll(async () => {
    if (pool && app) await release(pool, schema, '*');
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  /** The keys of the queue's bodies in the order they began. */
  const startOrder = async (queue: string) =>
    (await pool.query(`SELECT key FROM "${schema}".runs WHERE queue_name = $1 ORDER BY id`, [queue])).rows.map(
      (row) => row.key,
    );

  const row = async (workflowId: string) =>
    (
      await pool.query(
        `SELECT status, priority, (extract(epoch FROM created_at) * 1000000)::float8 AS created,
                (extract(epoch FROM started_at) * 1000000)::float8 AS started,
                (extract(epoch FROM not_before) * 1000000)::float8 AS not_before,
                not_before > clock_timestamp() AS still_delayed
         FROM "${schema}".workflows WHERE workflow_id = $1`,
        [workflowId],
      )
    ).rows[0];

  const running = (key: string) =>
    waitFor(async () => (await pool.query(`SELECT 1 FROM "${schema}".runs WHERE key = $1`, [key])).rowCount === 1, {
      what: `${key} to start`,
    });

  /** Priority then enqueue order: the order the claim must follow. */
  const byPriority = (plan: number[], prefix: string) =>
    plan
      .map((priority, n) => ({ priority, n }))
      .sort((a, b) => a.priority - b.priority || a.n - b.n)
      .map(({ n }) => `${prefix}${n}`);

  it('starts by priority, then in enqueue order, on a concurrency-1 queue', async () => {
    await app.queues.enqueue('serial', tasks.hold, ['blocker']);
    await running('blocker');
    const plan = [5, 0, 5, -3, 0, 5, 1, -3, 0, 1, 5, 0];
    for (const [n, priority] of plan.entries()) {
      await app.queues.enqueue('serial', tasks.record, [`item-${n}`, 0], { priority });
    }
    expect(await countByStatus(pool, schema, 'serial')).toEqual({ PENDING: 1, ENQUEUED: plan.length });

    await release(pool, schema, 'blocker');
    await waitFor(async () => (await countByStatus(pool, schema, 'serial')).SUCCESS === plan.length + 1, {
      what: 'the serial queue to drain',
    });

    const expected = ['blocker', ...byPriority(plan, 'item-')];
    expect(await startOrder('serial')).toEqual(expected);
    // The queue's own record agrees: started_at follows the same order, and never two at once.
    const { rows } = await pool.query(
      `SELECT (inputs->>0) AS key FROM "${schema}".workflows WHERE queue_name = 'serial' ORDER BY started_at, seq`,
    );
    expect(rows.map((r) => r.key)).toEqual(expected);
    expect(maxOverlap(await pendingIntervals(pool, schema, 'serial'))).toBe(1);
  });

  it('starts by priority, then in enqueue order, within a partition, while a busy partition does not hold up another', async () => {
    await app.queues.enqueue('keyed', tasks.hold, ['u-blocker'], { partitionKey: 'u' });
    await running('u-blocker');
    const plan = [3, 1, 2, 1, 3, 0];
    for (const [n, priority] of plan.entries()) {
      await app.queues.enqueue('keyed', tasks.record, [`u-${n}`, 0], { partitionKey: 'u', priority });
    }
    // Another partition runs at once although 'u' is full and has older work waiting.
    const other = await app.queues.enqueue('keyed', tasks.record, ['v-0', 0], { partitionKey: 'v', priority: 9 });
    await expect(other.getResult({ timeoutMs: 10_000 })).resolves.toBe('v-0');
    expect(await countByStatus(pool, schema, 'keyed')).toEqual({ PENDING: 1, ENQUEUED: plan.length, SUCCESS: 1 });

    await release(pool, schema, 'u-blocker');
    await waitFor(async () => (await countByStatus(pool, schema, 'keyed')).SUCCESS === plan.length + 2, {
      what: 'the keyed queue to drain',
    });
    const order = (await startOrder('keyed')).filter((key: string) => key.startsWith('u-'));
    expect(order).toEqual(['u-blocker', ...byPriority(plan, 'u-')]);
  });

  it('starts delayed workflows (delayMs, runAt) no earlier than their time, holding their keys meanwhile', async () => {
    // Long enough that the checks below surely happen while both still wait, even on a loaded machine.
    const delayMs = 3000;
    const runAt = new Date(Date.now() + 3500);
    const delayed = await app.queues.enqueue('delayed', tasks.record, ['delayed', 0], {
      delayMs,
      deduplicationId: 'delay-key',
    });
    const scheduled = await app.queues.enqueue('delayed', tasks.record, ['scheduled', 0], {
      runAt,
      deduplicationId: 'run-at-key',
    });
    const immediate = await app.queues.enqueue('delayed', tasks.record, ['immediate', 0]);

    // While they wait, their keys are held: a duplicate names the delayed holder.
    await expect(
      app.queues.enqueue('delayed', tasks.record, ['again', 0], { deduplicationId: 'delay-key' }),
    ).rejects.toMatchObject({
      name: QueueDeduplicatedError.name,
      existingWorkflowId: delayed.workflowId,
    });
    await expect(
      app.queues.enqueue('delayed', tasks.record, ['again', 0], { deduplicationId: 'run-at-key' }),
    ).rejects.toMatchObject({
      name: QueueDeduplicatedError.name,
      existingWorkflowId: scheduled.workflowId,
    });
    await expect(immediate.getResult({ timeoutMs: 10_000 })).resolves.toBe('immediate');
    // ... and they were still waiting after the duplicates were refused and undelayed work ran.
    expect(await row(delayed.workflowId)).toMatchObject({ status: 'ENQUEUED', still_delayed: true });
    expect(await row(scheduled.workflowId)).toMatchObject({ status: 'ENQUEUED', still_delayed: true });

    await expect(delayed.getResult({ timeoutMs: 15_000 })).resolves.toBe('delayed');
    await expect(scheduled.getResult({ timeoutMs: 15_000 })).resolves.toBe('scheduled');
    const delayedRow = await row(delayed.workflowId);
    const scheduledRow = await row(scheduled.workflowId);
    const lateness = {
      delayMsStartedAfterDueMs: (delayedRow.started - (delayedRow.created + delayMs * MS)) / MS,
      runAtStartedAfterDueMs: (scheduledRow.started - runAt.getTime() * MS) / MS,
    };
    console.log(
      `[flow-control] delayed starts after their due time (pollIntervalMs ${POLL_MS}):`,
      JSON.stringify(lateness),
    );
    expect(delayedRow.started).toBeGreaterThanOrEqual(delayedRow.created + delayMs * MS);
    expect(scheduledRow.started).toBeGreaterThanOrEqual(runAt.getTime() * MS);

    // Done, the keys are free again.
    const next = await app.queues.enqueue('delayed', tasks.record, ['next', 0], { deduplicationId: 'delay-key' });
    await expect(next.getResult({ timeoutMs: 10_000 })).resolves.toBe('next');
  });

  it('reschedule moves a delayed workflow earlier (delayMs or runAt)', async () => {
    const far = await app.queues.enqueue('delayed', tasks.record, ['far', 0], {
      delayMs: 600_000,
      deduplicationId: 'far-key',
    });
    const farAt = await app.queues.enqueue('delayed', tasks.record, ['far-at', 0], {
      runAt: new Date(Date.now() + 600_000),
    });
    expect(await row(far.workflowId)).toMatchObject({ status: 'ENQUEUED', still_delayed: true });

    await app.queues.reschedule(far.workflowId, { delayMs: 0 });
    await app.queues.reschedule(farAt.workflowId, { runAt: new Date() });
    await expect(far.getResult({ timeoutMs: 10_000 })).resolves.toBe('far');
    await expect(farAt.getResult({ timeoutMs: 10_000 })).resolves.toBe('far-at');
  });

  it('reschedule moves a workflow later and changes its priority', async () => {
    await app.queues.enqueue('serial', tasks.hold, ['blocker-2']);
    await running('blocker-2');
    const ids: string[] = [];
    for (const key of ['x1', 'x2', 'x3'])
      ids.push((await app.queues.enqueue('serial', tasks.record, [key, 0])).workflowId);
    const [x1, x2, x3] = ids;

    const before = await dbNow(pool);
    await app.queues.reschedule(x1, { delayMs: 1000 });
    await app.queues.reschedule(x3, { priority: -1 });
    expect(await row(x1)).toMatchObject({ status: 'ENQUEUED', priority: 0, still_delayed: true });
    expect((await row(x1)).not_before).toBeGreaterThanOrEqual(before + 1000 * MS);
    expect(await row(x3)).toMatchObject({ status: 'ENQUEUED', priority: -1 });

    await release(pool, schema, 'blocker-2');
    await waitFor(async () => (await row(x1)).status === 'SUCCESS', { what: 'x1 to run', timeoutMs: 15_000 });
    expect((await startOrder('serial')).slice(-4)).toEqual(['blocker-2', 'x3', 'x2', 'x1']);
    expect((await row(x1)).started).toBeGreaterThanOrEqual(before + 1000 * MS);
    expect(await row(x2)).toMatchObject({ status: 'SUCCESS' });

    // Only ENQUEUED workflows can be rescheduled.
    await expect(app.queues.reschedule(x1, { delayMs: 0 })).rejects.toThrow(InvalidArgumentError);
    await expect(app.queues.reschedule('no-such-workflow', { priority: 1 })).rejects.toThrow(WorkflowNotFoundError);
    await expect(app.queues.reschedule(x2, { delayMs: 1, runAt: new Date() })).rejects.toThrow(InvalidArgumentError);
  });
});
