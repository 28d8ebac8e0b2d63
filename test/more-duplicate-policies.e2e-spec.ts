/**
 * The duplicate policies of the third round, in one process against a real Postgres: `requireSameArgs`
 * (`DeduplicationMismatchError`, 422 over HTTP), `onDuplicate: 'supersede'` (the holder ends CANCELLED, both rows
 * name each other, a running holder's signal aborts) and `maxDelayMs` (a debounce's start never later than the key
 * was taken plus the cap, by the database's clock). The races across processes are in
 * supersede-race.e2e-spec.ts; every policy against every kind of holder in duplicate-policy-table.e2e-spec.ts.
 */
import { Body, Controller, INestApplication, Injectable, Param, Post, UseFilters } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  DedupExceptionFilter,
  DedupQueueModule,
  DeduplicationEvent,
  DeduplicationMismatchError,
  DedupQueueError,
  EnqueueOptions,
  InvalidArgumentError,
  QueueDeduplicatedError,
  QueueService,
  Workflow,
  workflowContext,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import request from 'supertest';
import { GatedRuns } from './fixtures/recording-tasks';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { waitFor } from './support/wait-for';

@Injectable()
class PolicyTasks extends GatedRuns<{ label: string; workflowId: string }> {
  readonly aborted = new Set<string>();

  @Workflow()
  async hold(label: string, extra?: unknown): Promise<string> {
    const { workflowId, signal } = workflowContext();
    this.runs.push({ label, workflowId });
    signal.addEventListener('abort', () => this.aborted.add(workflowId));
    await this.gate(label).wait();
    return extra === undefined ? label : `${label}:${JSON.stringify(extra)}`;
  }
}

@Controller('orders')
@UseFilters(DedupExceptionFilter)
class OrdersController {
  constructor(
    private readonly queues: QueueService,
    private readonly tasks: PolicyTasks,
  ) {}

  @Post(':key')
  async create(@Param('key') key: string, @Body() body: { label: string; extra?: unknown }) {
    const handle = await this.queues.enqueue('tasks', this.tasks.hold, [body.label, body.extra], {
      deduplicationId: key,
      onDuplicate: 'return-existing',
      requireSameArgs: true,
    });
    return { workflowId: handle.workflowId, created: handle.created };
  }
}

const schema = uniqueSchema('more_policies');
const view = `"${schema}".workflows`;
let pool: Pool;
let app: INestApplication;
let queues: QueueService;
let tasks: PolicyTasks;

beforeAll(async () => {
  pool = testPool();
  const module = await Test.createTestingModule({
    imports: [
      DedupQueueModule.forRoot({
        connection: { url: databaseUrl(), poolSize: 6 },
        schema,
        queues: [{ name: 'tasks', workerConcurrency: 20 }, { name: 'idle' }],
        worker: { queues: ['tasks'] },
        shutdownGraceMs: 500,
      }),
    ],
    controllers: [OrdersController],
    providers: [PolicyTasks],
  }).compile();
  app = module.createNestApplication({ logger: false });
  await app.init();
  queues = app.get(QueueService);
  tasks = app.get(PolicyTasks);
});

afterAll(async () => {
  tasks?.openAll();
  await app?.close();
  await dropSchema(pool, schema);
  await pool.end();
});

const started = (label: string) => waitFor(() => tasks.ran(label)[0], { what: `${label} to start` });

const rejection = (promise: Promise<unknown>) =>
  promise.then(
    () => undefined,
    (error: unknown) => error,
  );

async function rowsOf(queue: string, key: string) {
  return (
    await pool.query(
      `SELECT workflow_id, status, inputs::text AS inputs, active_deduplication_id, superseded_by, supersedes
       FROM ${view} WHERE queue_name = $1 AND deduplication_id = $2 ORDER BY seq`,
      [queue, key],
    )
  ).rows;
}

describe('requireSameArgs', () => {
  it.each<[string, EnqueueOptions]>([
    ["'reject'", { onDuplicate: 'reject' }],
    ["'return-existing'", { onDuplicate: 'return-existing' }],
    ["'replace'", { onDuplicate: 'replace' }],
    ["'replace' + 'queue-next'", { onDuplicate: 'replace', whenRunning: 'queue-next' }],
    ["'supersede'", { onDuplicate: 'supersede' }],
  ])('%s: other arguments are DeduplicationMismatchError naming the holder; nothing written', async (_, policy) => {
    for (const running of [false, true]) {
      const key = `same-${policy.onDuplicate}-${policy.whenRunning ?? ''}-${running}`;
      const label = `${key}-holder`;
      const holder = await queues.enqueue(running ? 'tasks' : 'idle', tasks.hold, [label, { n: 1, m: [1, 2] }], {
        deduplicationId: key,
      });
      if (running) await started(label);
      const queue = running ? 'tasks' : 'idle';
      const before = await rowsOf(queue, key);
      const events: DeduplicationEvent[] = [];
      const unsubscribe = queues.onDeduplicated((event) => events.push(event));

      const error = await rejection(
        queues.enqueue(queue, tasks.hold, [label, { n: 2, m: [1, 2] }], {
          ...policy,
          deduplicationId: key,
          requireSameArgs: true,
        }),
      );
      expect(error).toBeInstanceOf(DeduplicationMismatchError);
      expect(error).toBeInstanceOf(DedupQueueError);
      expect(error).not.toBeInstanceOf(QueueDeduplicatedError);
      expect(error).toMatchObject({
        name: 'DeduplicationMismatchError',
        queueName: queue,
        deduplicationId: key,
        existingWorkflowId: holder.workflowId,
      });
      expect(await rowsOf(queue, key)).toEqual(before);
      expect(events).toEqual([
        { queueName: queue, deduplicationId: key, existingWorkflowId: holder.workflowId, outcome: 'mismatched' },
      ]);

      // The same arguments as stored JSON (key order and spacing do not matter): the policy applies.
      const same = await rejection(
        queues.enqueue(queue, tasks.hold, [label, { m: [1, 2], n: 1 }], {
          ...policy,
          deduplicationId: key,
          requireSameArgs: true,
        }),
      );
      unsubscribe();
      expect(same).not.toBeInstanceOf(DeduplicationMismatchError);
      if (policy.onDuplicate === 'reject') expect(same).toBeInstanceOf(QueueDeduplicatedError);
      if (running) tasks.gate(label).open();
      else await queues.cancel(holder.workflowId);
    }
  });

  it('answers 422 over HTTP through DedupExceptionFilter; the same request again is the holder (201)', async () => {
    const server = app.getHttpServer();
    const first = await request(server)
      .post('/orders/o-1')
      .send({ label: 'o-1', extra: { total: 10 } });
    expect(first.status).toBe(201);
    expect(first.body.created).toBe(true);
    const again = await request(server)
      .post('/orders/o-1')
      .send({ label: 'o-1', extra: { total: 10 } });
    expect(again.status).toBe(201);
    expect(again.body).toEqual({ workflowId: first.body.workflowId, created: false });

    const other = await request(server)
      .post('/orders/o-1')
      .send({ label: 'o-1', extra: { total: 11 } });
    expect(other.status).toBe(422);
    expect(other.body).toEqual({
      statusCode: 422,
      error: 'Unprocessable Entity',
      message: expect.stringContaining('arguments differ'),
      queueName: 'tasks',
      deduplicationId: 'o-1',
      existingWorkflowId: first.body.workflowId,
    });
    tasks.gate('o-1').open();
  });

  it('is refused without a deduplicationId, and when not a boolean, before writing', async () => {
    await expect(queues.enqueue('idle', tasks.hold, ['x'], { requireSameArgs: true })).rejects.toMatchObject({
      name: 'InvalidArgumentError',
      field: 'options.requireSameArgs',
    });
    await expect(
      queues.enqueue('idle', tasks.hold, ['x'], { deduplicationId: 'r', requireSameArgs: 'yes' as never }),
    ).rejects.toBeInstanceOf(InvalidArgumentError);
    expect((await pool.query(`SELECT count(*)::int AS n FROM ${view} WHERE inputs::text = '["x"]'`)).rows[0].n).toBe(0);
  });
});

describe("onDuplicate: 'supersede'", () => {
  const supersede = (queue: string, label: string, key: string, extra?: EnqueueOptions) =>
    queues.enqueue(queue, tasks.hold, [label], { deduplicationId: key, onDuplicate: 'supersede', ...extra });

  it('a queued holder ends CANCELLED, the new workflow takes the key, both rows name each other', async () => {
    const key = 'sup-queued';
    const holder = await queues.enqueue('idle', tasks.hold, ['sup-queued-a'], { deduplicationId: key });
    const events: DeduplicationEvent[] = [];
    const unsubscribe = queues.onDeduplicated((event) => events.push(event));
    const next = await supersede('idle', 'sup-queued-b', key);
    unsubscribe();

    expect(next.created).toBe(true);
    expect(next.workflowId).not.toBe(holder.workflowId);
    expect(await rowsOf('idle', key)).toEqual([
      expect.objectContaining({
        workflow_id: holder.workflowId,
        status: 'CANCELLED',
        active_deduplication_id: null,
        superseded_by: next.workflowId,
        supersedes: null,
      }),
      expect.objectContaining({
        workflow_id: next.workflowId,
        status: 'ENQUEUED',
        active_deduplication_id: key,
        superseded_by: null,
        supersedes: holder.workflowId,
      }),
    ]);
    await expect(holder.getStatus()).resolves.toMatchObject({ status: 'CANCELLED', supersededBy: next.workflowId });
    await expect(next.getStatus()).resolves.toMatchObject({ status: 'ENQUEUED', supersedes: holder.workflowId });
    await expect(holder.getResult()).rejects.toMatchObject({ name: 'WorkflowCancelledError' });
    expect(events).toEqual([
      { queueName: 'idle', deduplicationId: key, existingWorkflowId: holder.workflowId, outcome: 'superseded' },
    ]);
    await queues.cancel(next.workflowId);
  });

  it('a running holder is aborted (its signal fires) and its waiting follow-up is cancelled too', async () => {
    const key = 'sup-running';
    const holder = await queues.enqueue('tasks', tasks.hold, ['sup-running-a'], { deduplicationId: key });
    await started('sup-running-a');
    const followUp = await queues.enqueue('tasks', tasks.hold, ['sup-running-next'], {
      deduplicationId: key,
      onDuplicate: 'replace',
      whenRunning: 'queue-next',
    });
    expect(followUp.created).toBe(true);

    const next = await supersede('tasks', 'sup-running-b', key);
    expect(next.created).toBe(true);
    await waitFor(() => tasks.aborted.has(holder.workflowId), { what: 'the running holder to be aborted' });
    const rows = await rowsOf('tasks', key);
    expect(rows.map((row) => [row.workflow_id, row.status, row.superseded_by, row.supersedes])).toEqual([
      [holder.workflowId, 'CANCELLED', next.workflowId, null],
      [followUp.workflowId, 'CANCELLED', next.workflowId, null],
      [next.workflowId, expect.stringMatching(/^(ENQUEUED|PENDING)$/), null, holder.workflowId],
    ]);
    await started('sup-running-b');
    tasks.gate('sup-running-a').open();
    tasks.gate('sup-running-b').open();
    await expect(next.getResult()).resolves.toBe('sup-running-b');
    expect(tasks.ran('sup-running-next')).toEqual([]);
    // The aborted body's late return is not recorded: the holder stays CANCELLED.
    await expect(holder.getStatus()).resolves.toMatchObject({ status: 'CANCELLED' });
  });

  it('a free key: a new workflow, superseding nothing', async () => {
    const handle = await supersede('tasks', 'sup-free', 'sup-free');
    expect(handle.created).toBe(true);
    tasks.gate('sup-free').open();
    await expect(handle.getResult()).resolves.toBe('sup-free');
    const status = await handle.getStatus();
    expect(status.supersedes).toBeUndefined();
  });

  it('a finished holder within its deduplication window is not superseded: QueueDeduplicatedError', async () => {
    const key = 'sup-window';
    tasks.gate('sup-window-a').open();
    const holder = await queues.enqueue('tasks', tasks.hold, ['sup-window-a'], {
      deduplicationId: key,
      deduplicationWindowMs: 60_000,
    });
    await holder.getResult();
    await expect(supersede('tasks', 'sup-window-b', key)).rejects.toMatchObject({
      name: 'QueueDeduplicatedError',
      existingWorkflowId: holder.workflowId,
    });
    expect((await rowsOf('tasks', key)).map((row) => row.status)).toEqual(['SUCCESS']);
  });

  it('the same workflowId twice is idempotent; enqueueMany supersedes item by item', async () => {
    const key = 'sup-bulk';
    const first = await supersede('idle', 'sup-bulk-a', key, { workflowId: 'sup-bulk-fixed' });
    const again = await supersede('idle', 'sup-bulk-a', key, { workflowId: 'sup-bulk-fixed' });
    expect({ workflowId: again.workflowId, created: again.created }).toEqual({
      workflowId: first.workflowId,
      created: false,
    });
    const results = await queues.enqueueMany(
      'idle',
      tasks.hold,
      [
        { args: ['sup-bulk-b'], options: { deduplicationId: key } },
        { args: ['sup-bulk-c'], options: { deduplicationId: 'sup-bulk-other' } },
        { args: ['sup-bulk-d'] },
      ],
      { onDuplicate: 'supersede' },
    );
    expect(results).toEqual([
      { status: 'created', workflowId: expect.any(String), supersededWorkflowId: first.workflowId },
      { status: 'created', workflowId: expect.any(String) },
      { status: 'created', workflowId: expect.any(String) },
    ]);
    expect((await rowsOf('idle', key)).map((row) => [row.workflow_id, row.status])).toEqual([
      [first.workflowId, 'CANCELLED'],
      [results[0].workflowId, 'ENQUEUED'],
    ]);
    await expect(
      queues.enqueueMany(
        'idle',
        tasks.hold,
        [
          { args: ['x'], options: { deduplicationId: 'dup' } },
          { args: ['y'], options: { deduplicationId: 'dup' } },
        ],
        { onDuplicate: 'supersede' },
      ),
    ).rejects.toMatchObject({ name: 'InvalidArgumentError', field: 'items[1].options.deduplicationId' });
    for (const result of results) await queues.cancel(result.workflowId);
  });
});

describe('maxDelayMs (a capped debounce)', () => {
  const times = async (workflowId: string) =>
    (
      await pool.query(
        `SELECT created_at, not_before, started_at, start_deadline,
                (extract(epoch FROM start_deadline - created_at) * 1000)::float8 AS cap_ms
         FROM "${schema}".workflow_queue WHERE workflow_id = $1
         UNION ALL
         SELECT created_at, not_before, started_at, NULL, NULL FROM "${schema}".workflow_history WHERE workflow_id = $1`,
        [workflowId],
      )
    ).rows[0];

  it('a steady stream of replaces never moves the start past the key taken + maxDelayMs, by the database clock', async () => {
    const key = 'debounce-capped';
    tasks.gate(key).open();
    const policy: EnqueueOptions = { deduplicationId: key, onDuplicate: 'replace', delayMs: 600, maxDelayMs: 1500 };
    const first = await queues.enqueue('tasks', tasks.hold, [key, 0], policy);
    const { created_at: createdAt } = await times(first.workflowId);
    const deadline = (createdAt as Date).getTime() + 1500;
    // A replace every 100 ms, each asking for 600 ms more: uncapped, the start would move on for as long as they come.
    let replaces = 0;
    let lastNotBefore = 0;
    for (let n = 1; ; n++) {
      const handle = await queues.enqueue('tasks', tasks.hold, [key, n], policy).catch((error: unknown) => {
        // A running holder is not replaced: with `whenRunning: 'reject'` (the default) the call is refused while it runs.
        if (error instanceof QueueDeduplicatedError && error.existingWorkflowId === first.workflowId) return undefined;
        throw error;
      });
      if (!handle || handle.workflowId !== first.workflowId) break; // it started: refused, or the key taken afresh
      replaces += 1;
      const row = await times(first.workflowId);
      lastNotBefore = (row.not_before as Date).getTime();
      expect(lastNotBefore).toBeLessThanOrEqual(deadline);
      if (row.started_at) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
      if (n > 100) throw new Error('the debounced workflow never started');
    }
    const result = await first.getResult();
    const row = await times(first.workflowId);
    expect(replaces).toBeGreaterThanOrEqual(5);
    expect(lastNotBefore).toBe(deadline);
    expect((row.started_at as Date).getTime()).toBeGreaterThanOrEqual(deadline);
    // A delayed start is picked up by the next poll (docs/flow-control.md: within pollIntervalMs, 1 s here), plus the
    // claim's own time on a loaded machine.
    expect((row.started_at as Date).getTime() - deadline).toBeLessThan(2000);
    expect(result).toMatch(new RegExp(`^${key}:\\d+$`));
  });

  it('without maxDelayMs the same stream moves the start on', async () => {
    const key = 'debounce-uncapped';
    const policy: EnqueueOptions = { deduplicationId: key, onDuplicate: 'replace', delayMs: 600 };
    const first = await queues.enqueue('tasks', tasks.hold, [key, 0], policy);
    const { created_at: createdAt } = await times(first.workflowId);
    for (let n = 1; n <= 12; n++) {
      expect((await queues.enqueue('tasks', tasks.hold, [key, n], policy)).workflowId).toBe(first.workflowId);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const row = await times(first.workflowId);
    expect((row.not_before as Date).getTime()).toBeGreaterThan((createdAt as Date).getTime() + 1500);
    await queues.cancel(first.workflowId);
  });

  it('a queue-next follow-up starts its own window, counted from when it was queued', async () => {
    const key = 'debounce-follow-up';
    const holder = await queues.enqueue('tasks', tasks.hold, ['debounce-holder'], { deduplicationId: key });
    await started('debounce-holder');
    await new Promise((resolve) => setTimeout(resolve, 300));
    const policy: EnqueueOptions = {
      deduplicationId: key,
      onDuplicate: 'replace',
      whenRunning: 'queue-next',
      delayMs: 100,
      maxDelayMs: 800,
    };
    const followUp = await queues.enqueue('tasks', tasks.hold, ['debounce-next'], policy);
    expect(followUp.created).toBe(true);
    const [holderRow, followRow] = [await times(holder.workflowId), await times(followUp.workflowId)];
    expect(followRow.cap_ms).toBe(800);
    expect((followRow.created_at as Date).getTime()).toBeGreaterThan((holderRow.created_at as Date).getTime() + 250);
    tasks.gate('debounce-next').open();
    tasks.gate('debounce-holder').open();
    await expect(followUp.getResult()).resolves.toBe('debounce-next');
  });

  it.each<[string, EnqueueOptions, string]>([
    ['without replace', { maxDelayMs: 1000, delayMs: 10 }, 'options.maxDelayMs'],
    ['without delayMs', { onDuplicate: 'replace', maxDelayMs: 1000 }, 'options.maxDelayMs'],
    ['below delayMs', { onDuplicate: 'replace', delayMs: 2000, maxDelayMs: 1000 }, 'options.delayMs'],
    ['not a positive integer', { onDuplicate: 'replace', delayMs: 0, maxDelayMs: 0 }, 'options.maxDelayMs'],
  ])('is refused %s, before anything is written', async (_, options, field) => {
    await expect(
      queues.enqueue('idle', tasks.hold, ['max-delay-bad'], { deduplicationId: 'max-delay-bad', ...options }),
    ).rejects.toMatchObject({ name: 'InvalidArgumentError', field });
    expect(await rowsOf('idle', 'max-delay-bad')).toEqual([]);
  });
});
