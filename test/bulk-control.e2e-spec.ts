/**
 * `cancelMany(filter)` and `resumeMany(filter)`: what they match and what they do to each workflow (a running body's
 * signal aborts, a dead letter is matched but not cancelled, a resume whose key is held elsewhere is refused for that
 * workflow only), an empty filter refused before anything is written, and 10,000 workflows cancelled and resumed
 * with the statements counted and the time measured (printed).
 */
import { Injectable } from '@nestjs/common';
import {
  BulkControlResult,
  InvalidArgumentError,
  OnWorkflowEvent,
  UnknownQueueError,
  WorkflowEvent,
  WorkflowFilter,
  Workflow,
  workflowContext,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { Gate } from './fixtures/recording-tasks';
import { databaseUrl } from './support/database';
import { QueueApp, useQueueApp } from './support/queue-app';
import { captureStatements } from './support/statement-capture';
import { waitFor } from './support/wait-for';

@Injectable()
class BulkTasks {
  readonly started = new Set<string>();
  readonly aborted = new Set<string>();
  readonly gate = new Gate();
  /** The `cancelled` lifecycle events, as an application's listener gets them. */
  readonly cancelledEvents: WorkflowEvent[] = [];

  @OnWorkflowEvent('cancelled')
  recordCancelled(event: WorkflowEvent): void {
    this.cancelledEvents.push(event);
  }

  @Workflow()
  async hold(label: string): Promise<string> {
    const { workflowId, signal } = workflowContext();
    this.started.add(label);
    signal.addEventListener('abort', () => this.aborted.add(workflowId));
    await this.gate.wait();
    return label;
  }
}

/** The statements of the bulk calls (the worker's claims and sweeps run meanwhile and are not counted). */
const capture = captureStatements(/^\s*WITH (matched|candidates) AS|AS payload$/);
const suite = useQueueApp(
  'bulk_control',
  {
    connection: { url: databaseUrl(), poolSize: 6 },
    queues: [{ name: 'live', workerConcurrency: 5 }, { name: 'parked' }, { name: 'big' }],
    worker: { queues: ['live'] },
    shutdownGraceMs: 500,
  },
  [BulkTasks],
  {
    tasks: BulkTasks,
    beforeClose: () => {
      capture.restore();
      tasks?.gate.open();
    },
  },
);
const { schema } = suite;
const view = `"${schema}".workflows`;
let pool: Pool;
let app: QueueApp;
let tasks: BulkTasks;

beforeAll(() => ({ pool, app, tasks } = suite));

const statusOf = async (workflowId: string) =>
  (await pool.query(`SELECT status FROM ${view} WHERE workflow_id = $1`, [workflowId])).rows[0]?.status;

const sorted = (results: BulkControlResult[]) => [...results].sort((a, b) => a.workflowId.localeCompare(b.workflowId));

it('refuses an empty or malformed filter and an undeclared queue, before anything is written', async () => {
  const parked = await app.queues.enqueue('parked', tasks.hold, ['refused']);
  await expect(app.queues.cancelMany({})).rejects.toMatchObject({ name: 'InvalidArgumentError', field: 'filter' });
  await expect(app.queues.resumeMany({})).rejects.toBeInstanceOf(InvalidArgumentError);
  await expect(app.queues.cancelMany({ queue: 'parked' } as WorkflowFilter)).rejects.toMatchObject({
    field: 'filter.queue',
  });
  await expect(app.queues.cancelMany({ status: 'DONE' as never })).rejects.toMatchObject({ field: 'filter.status' });
  await expect(app.queues.cancelMany({ workflowIds: 'x' as never })).rejects.toMatchObject({
    field: 'filter.workflowIds',
  });
  await expect(app.queues.cancelMany({ queueName: 'nope' })).rejects.toBeInstanceOf(UnknownQueueError);
  expect(await statusOf(parked.workflowId)).toBe('ENQUEUED');
  await app.queues.cancel(parked.workflowId);
});

it('cancels what matches every field given: queued, delayed and running (aborted); a dead letter is not-cancellable', async () => {
  const queued = await app.queues.enqueue('parked', tasks.hold, ['q'], { deduplicationId: 'bulk-k1' });
  const delayed = await app.queues.enqueue('parked', tasks.hold, ['d'], {
    deduplicationId: 'bulk-k2',
    delayMs: 60_000,
  });
  const other = await app.queues.enqueue('parked', tasks.hold, ['o'], { deduplicationId: 'bulk-other' });
  const running = await app.queues.enqueue('live', tasks.hold, ['r'], { deduplicationId: 'bulk-k1' });
  await waitFor(() => tasks.started.has('r'), { what: 'the running workflow to start' });
  const dead = await app.queues.enqueue('parked', tasks.hold, ['dead'], { deduplicationId: 'bulk-k3' });
  await pool.query(
    `UPDATE "${schema}".workflow_queue SET status = 'MAX_RECOVERY_ATTEMPTS_EXCEEDED', active_deduplication_id = NULL
     WHERE workflow_id = $1`,
    [dead.workflowId],
  );

  const results = await app.queues.cancelMany({ deduplicationIds: ['bulk-k1', 'bulk-k2', 'bulk-k3'] });
  expect(sorted(results)).toEqual(
    sorted([
      { workflowId: queued.workflowId, outcome: 'cancelled' },
      { workflowId: delayed.workflowId, outcome: 'cancelled' },
      { workflowId: running.workflowId, outcome: 'cancelled' },
      { workflowId: dead.workflowId, outcome: 'not-cancellable' },
    ]),
  );
  const ids = [queued.workflowId, delayed.workflowId, running.workflowId];
  expect(
    tasks.cancelledEvents
      .filter((event) => event.event === 'cancelled' && ids.includes(event.workflowId))
      .map(({ workflowId, queueName }) => ({ workflowId, queueName }))
      .sort((a, b) => a.workflowId.localeCompare(b.workflowId)),
  ).toEqual(
    [
      { workflowId: queued.workflowId, queueName: 'parked' },
      { workflowId: delayed.workflowId, queueName: 'parked' },
      { workflowId: running.workflowId, queueName: 'live' },
    ].sort((a, b) => a.workflowId.localeCompare(b.workflowId)),
  );
  await waitFor(() => tasks.aborted.has(running.workflowId), { what: 'the running body to see its signal abort' });
  for (const id of [queued.workflowId, delayed.workflowId, running.workflowId]) {
    expect(await statusOf(id)).toBe('CANCELLED');
  }
  expect(await statusOf(other.workflowId)).toBe('ENQUEUED');
  expect(await statusOf(dead.workflowId)).toBe('MAX_RECOVERY_ATTEMPTS_EXCEEDED');

  // Only DELAYED ones of a queue; then nothing left to match.
  const later = await app.queues.enqueue('parked', tasks.hold, ['later'], { delayMs: 60_000 });
  await expect(app.queues.cancelMany({ queueName: 'parked', status: 'DELAYED' })).resolves.toEqual([
    { workflowId: later.workflowId, outcome: 'cancelled' },
  ]);
  expect(await statusOf(other.workflowId)).toBe('ENQUEUED');
  await expect(app.queues.cancelMany({ workflowIds: [later.workflowId] })).resolves.toEqual([]);

  // Resume: the cancelled ones and the dead letter; bulk-k1 is taken meanwhile, so one of its two stays cancelled.
  const taker = await app.queues.enqueue('parked', tasks.hold, ['taker'], { deduplicationId: 'bulk-k1' });
  const resumed = await app.queues.resumeMany({ deduplicationIds: ['bulk-k1', 'bulk-k2', 'bulk-k3'] });
  expect(sorted(resumed)).toEqual(
    sorted([
      { workflowId: queued.workflowId, outcome: 'key-held' },
      { workflowId: delayed.workflowId, outcome: 'resumed' },
      { workflowId: running.workflowId, outcome: 'resumed' }, // its key is per queue: free in 'live'
      { workflowId: dead.workflowId, outcome: 'resumed' },
    ]),
  );
  expect(await statusOf(queued.workflowId)).toBe('CANCELLED');
  expect(await statusOf(delayed.workflowId)).toBe('ENQUEUED');
  expect(await statusOf(dead.workflowId)).toBe('ENQUEUED');
  await app.queues.cancelMany({ queueName: 'parked' });
  await app.queues.cancelMany({ queueName: 'live' });
  expect(await statusOf(taker.workflowId)).toBe('CANCELLED');
  expect(await statusOf(running.workflowId)).toBe('CANCELLED');
});

it('10,000 workflows: cancelled and resumed in batches of 1000, one statement (and one NOTIFY) per batch', async () => {
  const items = Array.from({ length: 10_000 }, (_, n) => ({
    args: [`big-${n}`],
    options: { deduplicationId: `big-${n}` },
  }));
  let began = process.hrtime.bigint();
  const enqueued = await app.queues.enqueueMany('big', tasks.hold, items);
  const enqueueMs = Number(process.hrtime.bigint() - began) / 1e6;
  expect(enqueued.every((result) => result.status === 'created')).toBe(true);

  capture.captured = [];
  capture.capturing = true;
  began = process.hrtime.bigint();
  const cancelled = await app.queues.cancelMany({ queueName: 'big' });
  const cancelMs = Number(process.hrtime.bigint() - began) / 1e6;
  const cancelStatements = capture.captured.length;
  capture.captured = [];
  began = process.hrtime.bigint();
  const resumed = await app.queues.resumeMany({ queueName: 'big', status: 'CANCELLED' });
  const resumeMs = Number(process.hrtime.bigint() - began) / 1e6;
  const resumeStatements = capture.captured.length;
  capture.capturing = false;

  expect(cancelled).toHaveLength(10_000);
  expect(new Set(cancelled.map((result) => result.workflowId))).toEqual(
    new Set(enqueued.map((result) => result.workflowId)),
  );
  expect(cancelled.every((result) => result.outcome === 'cancelled')).toBe(true);
  expect(resumed).toHaveLength(10_000);
  expect(resumed.every((result) => result.outcome === 'resumed')).toBe(true);
  const { rows } = await pool.query(
    `SELECT status, count(*)::int AS n FROM ${view} WHERE queue_name = 'big' GROUP BY status`,
  );
  expect(rows).toEqual([{ status: 'ENQUEUED', n: 10_000 }]);
  // 10 batches of 1000 and a last one that matches nothing; the cancel's NOTIFY goes only for what it ended.
  expect(cancelStatements).toBeLessThanOrEqual(11 + 10);
  expect(resumeStatements).toBeLessThanOrEqual(11 + 10);
  process.stdout.write(
    `[bulk-control] 10,000 workflows (enqueueMany ${enqueueMs.toFixed(0)} ms): cancelMany ${cancelMs.toFixed(0)} ms in ${cancelStatements} statements, ` +
      `resumeMany ${resumeMs.toFixed(0)} ms in ${resumeStatements} statements\n`,
  );
  await app.queues.cancelMany({ queueName: 'big' });
});
