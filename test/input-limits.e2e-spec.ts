/**
 * `forRoot({ inputLimits })`: the size and depth of what callers store, and the length of keys, are refused with a
 * typed error before anything is written, in JavaScript (`InvalidArgumentError`) and in `<schema>.enqueue_workflow`
 * (SQLSTATE 22023, with the limits the booting process wrote to the schema); a value over a limit that a workflow
 * produces fails that run. A row written around those checks (an over-long ID or an over-deep value inserted straight
 * into the table) breaks neither a cancel of its queue nor the dashboard's workflow page.
 */
import { INestApplication, Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  DedupQueueDashboardModule,
  DedupQueueModule,
  InvalidArgumentError,
  QueueService,
  Workflow,
  setEvent,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import request from 'supertest';
import { HeldTasks } from './fixtures/held-tasks';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';
import { syncReadyRows } from './support/ready-rows';

const LIMITS = { maxValueBytes: 10_000, maxDepth: 8 };

/** `[[[...[0]...]]]`: `depth` arrays around a number. */
const nested = (depth: number): unknown => {
  let value: unknown = 0;
  for (let level = 0; level < depth; level++) value = [value];
  return value;
};

@Injectable()
class LimitTasks {
  @Workflow()
  async echo(value: unknown): Promise<unknown> {
    return value;
  }

  @Workflow()
  async returnsBytes(bytes: number): Promise<string> {
    return 'x'.repeat(bytes);
  }

  @Workflow()
  async setsEvent(bytes: number): Promise<string> {
    try {
      await setEvent('progress', 'x'.repeat(bytes));
      return 'set';
    } catch (error) {
      return `${(error as Error).name}: ${(error as Error).message}`;
    }
  }
}

/** `nested(depth)` as JSON text (JSON.stringify itself fails some thousands of levels down). */
const nestedJson = (depth: number): string => `${'['.repeat(depth)}0${']'.repeat(depth)}`;

describe('input limits', () => {
  const schema = uniqueSchema('input_limits');
  let pool: Pool;
  let app: INestApplication;
  let queues: QueueService;
  let tasks: LimitTasks;
  let held: HeldTasks;
  let other: QueueApp;

  const rowCount = async () =>
    Number((await pool.query(`SELECT count(*) AS n FROM "${schema}".workflows`)).rows[0].n as string);

  beforeAll(async () => {
    pool = testPool();
    const module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: databaseUrl() },
          schema,
          queues: [{ name: 'tasks' }, { name: 'parked' }],
          worker: { queues: ['tasks'] },
          pollIntervalMs: 3_600_000,
          inputLimits: LIMITS,
        }),
        DedupQueueDashboardModule.forRoot(),
      ],
      providers: [LimitTasks, HeldTasks],
    }).compile();
    app = module.createNestApplication({ logger: false });
    await app.init();
    queues = app.get(QueueService);
    tasks = app.get(LimitTasks);
    held = app.get(HeldTasks);
    other = await startQueueApp({
      schema,
      worker: false,
      queues: [{ name: 'tasks' }, { name: 'parked' }],
      inputLimits: LIMITS,
    });
  });

  afterAll(async () => {
    held?.openAll();
    await other?.close();
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  describe('from JavaScript', () => {
    const refused = async (call: () => Promise<unknown>, message: RegExp) => {
      const before = await rowCount();
      const error = await call().then(
        () => undefined,
        (caught: unknown) => caught as Error,
      );
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error?.message).toMatch(message);
      expect(await rowCount()).toBe(before);
    };

    it('refuses arguments nested 5,000 deep with InvalidArgumentError, not a RangeError', async () => {
      await refused(
        () => queues.enqueue('tasks', tasks.echo, [nested(5000)]),
        /^args\[0\](\[0\]){7} is nested deeper than 8 levels of arrays and objects \(inputLimits\.maxDepth\)$/,
      );
    });

    it('takes arguments exactly at the depth limit (the arguments’ own array is one level)', async () => {
      const handle = await queues.enqueue('tasks', tasks.echo, [nested(7)]);
      await expect(handle.getResult()).resolves.toEqual(nested(7));
    });

    it('refuses arguments over the size limit, and a huge one before serialising it', async () => {
      await refused(
        () => queues.enqueue('tasks', tasks.echo, [{ text: 'é'.repeat(5_000) }]),
        /^args is 10\d{3} bytes of JSON, over the limit of 10000 \(inputLimits\.maxValueBytes\)$/,
      );
      await refused(
        () => queues.enqueue('tasks', tasks.echo, ['x'.repeat(50_000_000)]),
        /^args is over 10000 bytes of JSON, the limit \(inputLimits\.maxValueBytes\)$/,
      );
    });

    it('refuses a message, a topic and an idempotency key over their limits', async () => {
      const target = await queues.enqueue('tasks', held.hold, ['receiver']);
      await refused(() => queues.send(target.workflowId, 'x'.repeat(9_999)), /^message is 10001 bytes of JSON/);
      await refused(() => queues.send(target.workflowId, nested(9)), /^message(\[0\]){8} is nested deeper than 8/);
      await refused(
        () => queues.send(target.workflowId, 'hi', { topic: 't'.repeat(256) }),
        /^options\.topic must be at most 255 characters, got 256$/,
      );
      await refused(
        () => queues.send(target.workflowId, 'hi', { idempotencyKey: 'k'.repeat(256) }),
        /^options\.idempotencyKey must be at most 255 characters, got 256$/,
      );
      await refused(() => queues.getEvent(target.workflowId, 'e'.repeat(256)), /^key must be at most 255 characters/);
      held.gate('receiver').open();
      await target.getResult();
    });

    it('refuses an event value over the limit inside the workflow, and fails a result over it', async () => {
      await expect((await queues.enqueue('tasks', tasks.setsEvent, [9_999])).getResult()).resolves.toBe(
        'InvalidArgumentError: value is 10001 bytes of JSON, over the limit of 10000 (inputLimits.maxValueBytes)',
      );
      const big = await queues.enqueue('tasks', tasks.returnsBytes, [9_999]);
      await expect(big.getResult()).rejects.toThrow(/The result is 10001 bytes of JSON, over the limit of 10000/);
      await expect(big.getStatus()).resolves.toMatchObject({
        status: 'ERROR',
        error: { name: 'UnstorableValueError' },
      });
    });
  });

  describe('from SQL', () => {
    const enqueueSql = (args: string, more = '') =>
      pool.query(
        `SELECT * FROM "${schema}".enqueue_workflow(queue_name => 'parked', workflow_name => 'LimitTasks.echo',
           args => $1::json${more})`,
        [args],
      );
    const refusedSql = async (query: Promise<unknown>, message: RegExp) => {
      const before = await rowCount();
      await expect(query).rejects.toMatchObject({ code: '22023', message: expect.stringMatching(message) });
      expect(await rowCount()).toBe(before);
    };

    it('applies the limits the process wrote at boot', async () => {
      const { rows } = await pool.query(`SELECT max_value_bytes, max_depth FROM "${schema}".input_limits`);
      expect(rows).toEqual([{ max_value_bytes: 10_000, max_depth: 8 }]);
    });

    it.each<[string, () => [string, string], RegExp]>([
      [
        'arguments nested 4,000 deep',
        () => [nestedJson(4000), ''],
        /args is nested deeper than 8 levels of arrays and objects \(inputLimits\.maxDepth\)/,
      ],
      ['arguments one level too deep', () => [JSON.stringify([nested(8)]), ''], /nested deeper than 8 levels/],
      [
        'arguments over the size limit',
        () => [JSON.stringify(['x'.repeat(10_000)]), ''],
        /args is 10004 bytes of JSON, over the limit of 10000 \(inputLimits\.maxValueBytes\)/,
      ],
      [
        'a 100 kB workflow ID',
        () => ['[]', `, new_workflow_id => '${'w'.repeat(100_000)}'`],
        /new_workflow_id must be 1 to 255 characters, got 100000/,
      ],
      ['an empty deduplication ID', () => ['[]', ", deduplication_id => ''"], /deduplication_id must be 1 to 255/],
      [
        'an over-long partition key',
        () => ['[]', `, partition_key => '${'p'.repeat(256)}'`],
        /partition_key must be 1 to 255 characters, got 256/,
      ],
    ])('refuses %s with SQLSTATE 22023 before anything is written', async (_, input, message) => {
      const [args, more] = input();
      await refusedSql(enqueueSql(args, more), message);
    });

    it('refuses an over-long workflow name, and takes strings that look like brackets', async () => {
      await refusedSql(
        pool.query(`SELECT * FROM "${schema}".enqueue_workflow('parked', $1, '[]')`, ['W'.repeat(256)]),
        /workflow_name must be a registered workflow name \(Class\.method\), 1 to 255 characters/,
      );
      const brackets = JSON.stringify([['[[[[[[[[[[[[', '{{{{{{{{{{{{\\"]]]]]', { key: '[[[[[[[[[[' }]]);
      const { rows } = await enqueueSql(brackets, ", deduplication_id => 'brackets'");
      expect(rows[0].created).toBe(true);
    });
  });

  describe('a row written around the checks', () => {
    const longId = `order-${'x'.repeat(100_000)}`;
    const insertRaw = async (workflowId: string, queueName: string, workflowName: string, inputs: string) => {
      await pool.query(
        `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs)
         VALUES ($1, $2, $3, 'ENQUEUED', $4::json)`,
        [workflowId, queueName, workflowName, inputs],
      );
      await syncReadyRows(pool, schema);
    };

    it('a 100 kB workflow ID breaks neither cancel nor cancelMany nor "Cancel all matching"', async () => {
      await insertRaw(longId, 'parked', 'LimitTasks.echo', '[]');
      const neighbour = await queues.enqueue('parked', tasks.echo, ['n1']);
      const results = await queues.cancelMany({ queueName: 'parked', status: 'ENQUEUED' });
      expect(results).toEqual(
        expect.arrayContaining([
          { workflowId: longId, outcome: 'cancelled' },
          { workflowId: neighbour.workflowId, outcome: 'cancelled' },
        ]),
      );
      await queues.resume(longId);
      await expect(queues.cancel(longId)).resolves.toBe('CANCELLED');
      await queues.resume(longId);
      const next = await queues.enqueue('parked', tasks.echo, ['n2']);
      const { body } = await request(app.getHttpServer())
        .post('/queues/api/workflows/cancel-matching')
        .set('content-type', 'application/json')
        .send({ queueName: 'parked', status: 'ENQUEUED' })
        .expect(200);
      expect(body.results).toEqual(
        expect.arrayContaining([
          { workflowId: longId, outcome: 'cancelled' },
          { workflowId: next.workflowId, outcome: 'cancelled' },
        ]),
      );
    });

    it('stops the run of a workflow with a 100 kB ID cancelled from another process', async () => {
      const id = `run-${'y'.repeat(100_000)}`;
      await insertRaw(id, 'tasks', 'HeldTasks.hold', '["long"]');
      await pool.query(`SELECT pg_notify($1, 'tasks')`, [`dedup_queue:${schema}`]);
      await waitFor(() => held.running.has('long'), { what: 'the run of the long-ID workflow' });
      const results = await other.queues.cancelMany({ queueName: 'tasks', status: 'PENDING' });
      expect(results).toEqual([{ workflowId: id, outcome: 'cancelled' }]);
      await waitFor(() => held.aborted.has('long'), { what: 'its run to stop', timeoutMs: 5000 });
    });

    it('shows an over-deep value written through SQL on the dashboard instead of failing the page', async () => {
      const id = 'deep-1';
      await insertRaw(id, 'parked', 'LimitTasks.echo', nestedJson(5000));
      const { body } = await request(app.getHttpServer()).get(`/queues/api/workflows/${id}`).expect(200);
      expect(body).toMatchObject({ workflowId: id, inputs: '(not shown: nested deeper than 8 levels)' });
    });
  });
});
