/**
 * A refused duplicate says what holds the key: a workflow that is queued, delayed, running, waiting, a dead letter
 * that keeps its key, or a finished workflow within its deduplication window (until when). Over HTTP through
 * `DedupExceptionFilter` (409, `existingStatus` and `windowEndsAt` in the body) and on `QueueDeduplicatedError`.
 */
import { Controller, INestApplication, Injectable, Param, Post, UseFilters } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  DedupExceptionFilter,
  DedupQueueModule,
  EnqueueOptions,
  QueueDeduplicatedError,
  QueueService,
  Workflow,
  WorkflowStatus,
  fromPg,
  runStep,
  sleep,
  workflowContext,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import request from 'supertest';
import { GatedRuns } from './fixtures/recording-tasks';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { activeTableLockWaits } from './support/lock-waits';
import { captureStatements } from './support/statement-capture';
import { waitFor } from './support/wait-for';

const HOUR = 3_600_000;

@Injectable()
class HolderTasks extends GatedRuns<{ label: string }> {
  @Workflow()
  async hold(label: string, mode: 'block' | 'sleep' | 'return' = 'block'): Promise<string> {
    this.runs.push({ label });
    if (mode === 'sleep') await sleep(HOUR);
    if (mode === 'block') await this.gate(label).wait();
    return label;
  }

  /** Runs another step on its retry than on its first attempt: parked as a dead letter that keeps its key. */
  @Workflow({ maxAttempts: 2, backoff: { initialDelayMs: 5, jitter: false } })
  async changesItsSteps(): Promise<string> {
    if (workflowContext().attempt === 1) {
      await runStep('first', () => 1);
      throw new Error('the first attempt fails');
    }
    return runStep('another', () => 'another');
  }
}

@Controller('jobs')
@UseFilters(DedupExceptionFilter)
class JobsController {
  constructor(
    private readonly queues: QueueService,
    private readonly tasks: HolderTasks,
  ) {}

  @Post(':queue/:key')
  async create(@Param('queue') queue: string, @Param('key') key: string) {
    const handle = await this.queues.enqueue(queue, this.tasks.hold, ['duplicate', 'return'], {
      deduplicationId: key,
    });
    return { workflowId: handle.workflowId };
  }
}

const schema = uniqueSchema('holder_states');
let pool: Pool;
let app: INestApplication;
let queues: QueueService;
let tasks: HolderTasks;

beforeAll(async () => {
  pool = testPool();
  const module = await Test.createTestingModule({
    imports: [
      DedupQueueModule.forRoot({
        connection: { url: databaseUrl() },
        schema,
        queues: [{ name: 'tasks', workerConcurrency: 10 }, { name: 'idle' }],
        worker: { queues: ['tasks'] },
        shutdownGraceMs: 500,
      }),
    ],
    controllers: [JobsController],
    providers: [HolderTasks],
  }).compile();
  app = module.createNestApplication({ logger: false });
  await app.init();
  queues = app.get(QueueService);
  tasks = app.get(HolderTasks);
});

afterAll(async () => {
  tasks?.openAll();
  await app?.close();
  await dropSchema(pool, schema);
  await pool.end();
});

/** Enqueues the key's holder and waits until it is in `status`; its ID. */
async function holder(
  queue: string,
  key: string,
  status: WorkflowStatus,
  enqueue: (options: EnqueueOptions) => Promise<{ workflowId: string }>,
): Promise<string> {
  const { workflowId } = await enqueue({ deduplicationId: key });
  const handle = await queues.retrieve(workflowId);
  await waitFor(async () => (await handle.getStatus()).status === status, { what: `${key}'s holder to be ${status}` });
  return workflowId;
}

async function refusedOverHttp(queue: string, key: string) {
  const response = await request(app.getHttpServer()).post(`/jobs/${queue}/${key}`);
  expect(response.status).toBe(409);
  return response.body as Record<string, unknown>;
}

const isoAbout = (ms: number) => (value: unknown) => {
  const at = Date.parse(String(value));
  return Math.abs(at - (Date.now() + ms)) < 60_000;
};

it('names a queued holder', async () => {
  const id = await holder('idle', 'queued', 'ENQUEUED', (o) => queues.enqueue('idle', tasks.hold, ['queued'], o));
  const body = await refusedOverHttp('idle', 'queued');
  expect(body).toMatchObject({ existingWorkflowId: id, existingStatus: 'ENQUEUED' });
  // The queue is not drained in this process, which the message adds.
  expect(body.message).toMatch(
    new RegExp(
      `^Deduplication ID "queued" is held in queue "idle" by workflow "${id}", which is queued; it is a run of`,
    ),
  );
  expect(body).not.toHaveProperty('windowEndsAt');
});

it('names a delayed holder and its start time', async () => {
  const id = await holder('tasks', 'delayed', 'DELAYED', (o) =>
    queues.enqueue('tasks', tasks.hold, ['delayed'], { ...o, delayMs: HOUR }),
  );
  const body = await refusedOverHttp('tasks', 'delayed');
  expect(body).toMatchObject({ existingWorkflowId: id, existingStatus: 'DELAYED' });
  const [, startsAt] = /which is delayed until (\S+)$/.exec(String(body.message)) ?? [];
  expect(isoAbout(HOUR)(startsAt)).toBe(true);
});

it('names a running holder', async () => {
  const id = await holder('tasks', 'running', 'PENDING', (o) => queues.enqueue('tasks', tasks.hold, ['running'], o));
  const body = await refusedOverHttp('tasks', 'running');
  expect(body).toMatchObject({ existingWorkflowId: id, existingStatus: 'PENDING' });
  expect(body.message).toMatch(/, which is running$/);
});

it('names a waiting holder', async () => {
  const id = await holder('tasks', 'waiting', 'WAITING', (o) =>
    queues.enqueue('tasks', tasks.hold, ['waiting', 'sleep'], o),
  );
  const body = await refusedOverHttp('tasks', 'waiting');
  expect(body).toMatchObject({ existingWorkflowId: id, existingStatus: 'WAITING' });
  expect(body.message).toMatch(/, which is waiting \(suspended in sleep\(\) or recv\(\)\)$/);
});

it('names a finished holder within its deduplication window and when the window ends', async () => {
  const id = await holder('tasks', 'window', 'SUCCESS', (o) =>
    queues.enqueue('tasks', tasks.hold, ['window', 'return'], { ...o, deduplicationWindowMs: HOUR }),
  );
  const body = await refusedOverHttp('tasks', 'window');
  expect(body).toMatchObject({ existingWorkflowId: id, existingStatus: 'SUCCESS' });
  expect(isoAbout(HOUR)(body.windowEndsAt)).toBe(true);
  expect(body.message).toBe(
    `Deduplication ID "window" is held in queue "tasks" by workflow "${id}", which ended (SUCCESS) and holds the key ` +
      `in its deduplication window until ${String(body.windowEndsAt)}`,
  );
  const error = await queues
    .enqueue('tasks', tasks.hold, ['again'], { deduplicationId: 'window', onDuplicate: 'supersede' })
    .catch((caught: unknown) => caught);
  expect(error).toBeInstanceOf(QueueDeduplicatedError);
  expect(error).toMatchObject({ existingStatus: 'SUCCESS', windowEndsAt: new Date(String(body.windowEndsAt)) });
});

it('names a dead letter that keeps its key', async () => {
  const id = await holder('tasks', 'dead', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED', (o) =>
    queues.enqueue('tasks', tasks.changesItsSteps, [], o),
  );
  const error = await queues
    .enqueue('tasks', tasks.hold, ['again'], { deduplicationId: 'dead' })
    .catch((caught: unknown) => caught);
  expect(error).toBeInstanceOf(QueueDeduplicatedError);
  expect(error).toMatchObject({ existingWorkflowId: id, existingStatus: 'MAX_RECOVERY_ATTEMPTS_EXCEEDED' });
  expect((error as Error).message).toMatch(
    /, which is dead-lettered and keeps the key until it is resumed or cancelled$/,
  );
  const body = await refusedOverHttp('tasks', 'dead');
  expect(body).toMatchObject({ existingWorkflowId: id, existingStatus: 'MAX_RECOVERY_ATTEMPTS_EXCEEDED' });
});

it('refuses a duplicate of a holder that the insert saw in that one statement', async () => {
  const { workflowId: holderId } = await queues.enqueue('idle', tasks.hold, ['seen'], { deduplicationId: 'seen' });
  const capture = captureStatements(/workflow_queue/);
  try {
    capture.capturing = true;
    const error = await queues
      .enqueue('idle', tasks.hold, ['again'], { deduplicationId: 'seen' })
      .catch((caught: unknown) => caught);
    capture.capturing = false;
    expect(error).toBeInstanceOf(QueueDeduplicatedError);
    expect(error).toMatchObject({ existingWorkflowId: holderId, existingStatus: 'ENQUEUED' });
    const aboutThisCall = capture.captured.filter(({ values }) =>
      values.some((value) => /\bseen\b/.test(String(value)) || String(value).includes(holderId)),
    );
    expect(aboutThisCall.map(({ text }) => /\bINSERT INTO\b[^;]*\bUNION ALL\b/s.test(text))).toEqual([true]);
  } finally {
    capture.restore();
  }
});

describe('a refused call racing the insert of its holder', () => {
  /** Keeps a promise's outcome without an unhandled rejection while the test does other things. */
  const settle = <T>(promise: Promise<T>) =>
    promise.then(
      (value) => ({ value, error: undefined }),
      (error: unknown) => ({ value: undefined, error }),
    );

  it('names a holder that committed while its insert waited (after the statement began)', async () => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const { workflowId: holderId } = await queues.enqueue('idle', tasks.hold, ['first'], {
        deduplicationId: 'racing',
        db: fromPg(client),
      });
      const refused = settle(queues.enqueue('idle', tasks.hold, ['second'], { deduplicationId: 'racing' }));
      await waitFor(async () => (await activeTableLockWaits(pool, schema)) >= 1, {
        what: 'the second enqueue to wait for the open transaction',
      });
      await client.query('COMMIT');
      const { value, error } = await refused;
      expect(value).toBeUndefined();
      expect(error).toBeInstanceOf(QueueDeduplicatedError);
      expect(error).toMatchObject({
        queueName: 'idle',
        deduplicationId: 'racing',
        existingWorkflowId: holderId,
        existingStatus: 'ENQUEUED',
      });
      expect((error as Error).message).toMatch(
        new RegExp(`^Deduplication ID "racing" is held in queue "idle" by workflow "${holderId}", which is queued;`),
      );
    } finally {
      client.release();
    }
  });

  it('names the holder that a call sent in the same statement inserted', async () => {
    const client = await pool.connect();
    try {
      // Two enqueues wait on keys that an open transaction holds, so the next calls gather into one statement.
      await client.query('BEGIN');
      for (const key of ['blocker-1', 'blocker-2']) {
        await queues.enqueue('idle', tasks.hold, [key], { deduplicationId: key, db: fromPg(client) });
      }
      const blocked = ['blocker-1', 'blocker-2'].map((key) =>
        settle(queues.enqueue('idle', tasks.hold, [key], { deduplicationId: key })),
      );
      await waitFor(async () => (await activeTableLockWaits(pool, schema)) >= 2, {
        what: 'both statements in flight to wait for the open transaction',
      });
      const calls = ['one', 'two'].map((label) =>
        settle(queues.enqueue('idle', tasks.hold, [label], { deduplicationId: 'same-batch' })),
      );
      await client.query('ROLLBACK');
      expect((await Promise.all(blocked)).map((outcome) => outcome.value?.created)).toEqual([true, true]);
      const outcomes = await Promise.all(calls);
      const accepted = outcomes.filter((outcome) => outcome.value !== undefined);
      const refused = outcomes.filter((outcome) => outcome.error !== undefined);
      expect(accepted).toHaveLength(1);
      expect(refused).toHaveLength(1);
      const holderId = accepted[0].value.workflowId;
      expect(refused[0].error).toBeInstanceOf(QueueDeduplicatedError);
      expect(refused[0].error).toMatchObject({
        queueName: 'idle',
        deduplicationId: 'same-batch',
        existingWorkflowId: holderId,
        existingStatus: 'ENQUEUED',
      });
      const { rows } = await pool.query<{ workflow_id: string }>(
        `SELECT workflow_id FROM "${schema}".workflow_queue WHERE queue_name = 'idle' AND active_deduplication_id = $1`,
        ['same-batch'],
      );
      expect(rows).toEqual([{ workflow_id: holderId }]);
    } finally {
      client.release();
    }
  });
});
