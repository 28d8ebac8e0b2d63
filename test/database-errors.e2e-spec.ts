import { Controller, Get, INestApplication, Param } from '@nestjs/common';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import {
  DatabaseQueryError,
  DatabaseUnavailableError,
  DedupExceptionFilter,
  DedupQueueConfigurationError,
  InvalidArgumentError,
  QueueDeduplicatedError,
  ScheduleNotFoundError,
  WorkflowIdConflictError,
  WorkflowNotFoundError,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import request from 'supertest';
import { RecordingTasks } from './fixtures/recording-tasks';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';

describe('refusals of the database reach each caller as typed errors', () => {
  const schema = uniqueSchema('dberr');
  let app: QueueApp;
  let tasks: RecordingTasks;
  let pool: Pool;

  beforeAll(async () => {
    pool = testPool();
    app = await startQueueApp({ schema, queues: [{ name: 'tasks' }], worker: false }, [RecordingTasks]);
    tasks = app.get(RecordingTasks);
    await pool.query(`
      CREATE FUNCTION "${schema}".refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.inputs::text LIKE '%poison%' THEN RAISE EXCEPTION 'poison row refused'; END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER refuse_poison BEFORE INSERT ON "${schema}".workflow_queue
        FOR EACH ROW EXECUTE FUNCTION "${schema}".refuse_poison();`);
  });

  afterAll(async () => {
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('fails only the caller whose row a combined statement could not store', async () => {
    const calls = Array.from({ length: 60 }, (_, index) =>
      app.queues.enqueue('tasks', tasks.echo, [index === 17 ? 'poison' : `ok-${index}`], {
        workflowId: `combined-${index}`,
      }),
    );
    const outcomes = await Promise.allSettled(calls);
    const failed = outcomes.flatMap((outcome, index) =>
      outcome.status === 'rejected' ? [{ index, reason: outcome.reason }] : [],
    );
    expect(failed.map(({ index }) => index)).toEqual([17]);
    expect(failed[0].reason).toBeInstanceOf(DatabaseQueryError);
    expect(failed[0].reason).toMatchObject({ code: 'P0001', message: expect.stringMatching(/poison row refused/) });
    const stored = await pool.query(
      `SELECT workflow_id FROM "${schema}".workflows WHERE workflow_id LIKE 'combined-%'`,
    );
    expect(stored.rowCount).toBe(59);
  });

  it('refuses a runAt that Postgres cannot store before writing anything', async () => {
    const before = await pool.query(`SELECT count(*)::int AS n FROM "${schema}".workflows`);
    await expect(app.queues.enqueue('tasks', tasks.echo, [1], { runAt: new Date(-8.64e15) })).rejects.toThrow(
      InvalidArgumentError,
    );
    await expect(
      app.queues.enqueue('tasks', tasks.echo, [1], {
        runAt: new Date(Date.UTC(-4713, 10, 24)),
        workflowId: 'earliest',
      }),
    ).resolves.toMatchObject({ workflowId: 'earliest' });
    const after = await pool.query(`SELECT count(*)::int AS n FROM "${schema}".workflows`);
    expect(after.rows[0].n).toBe(before.rows[0].n + 1);
  });
});

@Controller('errors')
class ErrorsController {
  @Get(':kind')
  fail(@Param('kind') kind: string): never {
    const cause = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
    const errors: Record<string, Error> = {
      duplicate: new QueueDeduplicatedError('tasks', 'u1', 'wf-1'),
      unavailable: new DatabaseUnavailableError('Postgres at 127.0.0.1:1/db is unavailable', cause, 7),
      invalid: new InvalidArgumentError('options.delayMs', 'must be an integer'),
      missing: new WorkflowNotFoundError('wf-404'),
      'missing-schedule': new ScheduleNotFoundError('nightly'),
      conflict: new WorkflowIdConflictError('wf-1', { queueName: 'other', workflowName: 'X.y' }),
      configuration: new DedupQueueConfigurationError('a programming error'),
    };
    throw errors[kind];
  }
}

describe.each(['express', 'fastify'] as const)('DedupExceptionFilter maps the whole error family (%s)', (platform) => {
  let http: INestApplication;

  beforeAll(async () => {
    const module = await Test.createTestingModule({ controllers: [ErrorsController] }).compile();
    http =
      platform === 'fastify'
        ? module.createNestApplication(new FastifyAdapter(), { logger: false })
        : module.createNestApplication({ logger: false });
    http.useGlobalFilters(new DedupExceptionFilter());
    await http.init();
    if (platform === 'fastify') await http.getHttpAdapter().getInstance().ready();
  });

  afterAll(() => http.close());

  it.each([
    ['duplicate', 409, { queueName: 'tasks', deduplicationId: 'u1', existingWorkflowId: 'wf-1' }],
    ['unavailable', 503, { error: 'Service Unavailable' }],
    ['invalid', 400, { field: 'options.delayMs', message: 'options.delayMs must be an integer' }],
    ['missing', 404, { error: 'Not Found' }],
    ['missing-schedule', 404, { error: 'Not Found' }],
    ['conflict', 409, { error: 'Conflict' }],
    ['configuration', 500, { message: 'Internal server error' }],
  ])('%s → %i', async (kind, status, body) => {
    const response = await request(http.getHttpServer()).get(`/errors/${kind}`);
    expect(response.status).toBe(status);
    expect(response.body).toMatchObject({ statusCode: status, ...body });
    if (kind === 'unavailable') expect(response.headers['retry-after']).toBe('7');
    if (kind === 'configuration') expect(JSON.stringify(response.body)).not.toMatch(/programming/);
  });
});
