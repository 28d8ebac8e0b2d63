import { Controller, Get, INestApplication, Param, Post } from '@nestjs/common';
import { Test, TestingModule } from '@nestjs/testing';
import {
  DatabaseQueryError,
  DatabaseUnavailableError,
  DedupExceptionFilter,
  DedupQueueModule,
  DedupQueueModuleOptions,
  QueueService,
  ScheduleService,
  WorkflowHandle,
} from 'nest-dedup-queue';
import { DatabaseError, Pool } from 'pg';
import request from 'supertest';
import { RecordingTasks } from './fixtures/recording-tasks';
import { CapturingLogger } from './support/capturing-logger';
import { databaseUrlOf, testPool, uniqueSchema } from './support/database';
import { waitFor } from './support/wait-for';

/**
 * Postgres refusing new sessions for a while (a database closed for maintenance, a connection limit reached) is an
 * outage, like a server that is down: `DatabaseUnavailableError` (503 with `Retry-After`), workers wait it out, boot
 * tries again. A refusal that trying again does not cure (a role that may not log in) stays a `DatabaseQueryError`.
 * Each describe refuses connections to a database of its own; the shared server's configuration is left alone.
 */

@Controller('tasks')
class TasksController {
  constructor(
    private readonly queues: QueueService,
    private readonly tasks: RecordingTasks,
  ) {}

  @Post(':value')
  async enqueue(@Param('value') value: string): Promise<{ workflowId: string }> {
    const { workflowId } = await this.queues.enqueue('tasks', this.tasks.echo, [value]);
    return { workflowId };
  }

  @Get(':workflowId')
  async status(@Param('workflowId') workflowId: string): Promise<unknown> {
    return (await this.queues.retrieve(workflowId)).getStatus();
  }
}

/** A real Nest HTTP application: the module on `url` with a worker for "tasks", and DedupExceptionFilter. */
async function startApp(url: string, logger: CapturingLogger): Promise<INestApplication> {
  const module = await Test.createTestingModule({
    imports: [moduleOn(url, { pollIntervalMs: 100 })],
    controllers: [TasksController],
    providers: [RecordingTasks],
  })
    .setLogger(logger)
    .compile();
  const app = module.createNestApplication();
  app.useGlobalFilters(new DedupExceptionFilter());
  await app.init();
  return app;
}

function moduleOn(url: string, options: Partial<DedupQueueModuleOptions> = {}) {
  return DedupQueueModule.forRoot({ connection: { url }, queues: [{ name: 'tasks' }], retryAttempts: 0, ...options });
}

/** Boots an application context with the module on `url` (no HTTP). */
async function bootOn(
  url: string,
  logger: CapturingLogger,
  options: Partial<DedupQueueModuleOptions>,
): Promise<TestingModule> {
  const module = await Test.createTestingModule({ imports: [moduleOn(url, options)] })
    .setLogger(logger)
    .compile();
  await module.init();
  return module;
}

/**
 * Ends the sessions of `database`, so that the application's pool must open new ones, and waits until all are gone.
 * Each look terminates what it finds: a session whose login began before the refusal was set up may still come in.
 */
async function endSessions(admin: Pool, database: string): Promise<void> {
  const sessions = `FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`;
  await waitFor(
    async () =>
      (await admin.query(`SELECT count(pg_terminate_backend(pid))::int AS n ${sessions}`, [database])).rows[0].n === 0,
    { what: `the sessions of ${database} to end` },
  );
}

/** What `call` rejected with (an Error saying so if it resolved). */
function failureOf(call: () => Promise<unknown>): Promise<unknown> {
  return call().then(
    () => new Error('the call succeeded'),
    (caught: unknown) => caught,
  );
}

/** The SQLSTATE of the driver's error behind one of the module's database errors. */
function causeCode(error: unknown): string | undefined {
  return ((error as { cause?: { code?: string } } | undefined)?.cause ?? {}).code;
}

/**
 * Every public call of QueueService and of a handle, each on `handle`'s workflow where it takes one, and those of
 * ScheduleService (`trigger` runs in a TypeORM transaction, as transactional steps do).
 */
function publicCalls(app: INestApplication, handle: WorkflowHandle<unknown>): Array<[string, () => Promise<unknown>]> {
  const queues = app.get(QueueService);
  const tasks = app.get(RecordingTasks);
  const schedules = app.get(ScheduleService);
  const id = handle.workflowId;
  return [
    ['enqueue', () => queues.enqueue('tasks', tasks.echo, ['refused'])],
    ['enqueueMany', () => queues.enqueueMany('tasks', tasks.echo, [{ args: ['refused'] }])],
    ['retrieve', () => queues.retrieve(id)],
    ['cancel', () => queues.cancel(id)],
    ['resume', () => queues.resume(id)],
    ['reschedule', () => queues.reschedule(id, { delayMs: 10 })],
    ['list', () => queues.list()],
    ['countByStatus', () => queues.countByStatus('tasks')],
    ['findByDeduplicationId', () => queues.findByDeduplicationId('tasks', 'k')],
    ['pauseQueue', () => queues.pauseQueue('tasks')],
    ['resumeQueue', () => queues.resumeQueue('tasks')],
    ['setQueueLimits', () => queues.setQueueLimits('tasks', { concurrency: 5 })],
    ['getStatus', () => handle.getStatus()],
    ['getResult', () => handle.getResult({ timeoutMs: 300 })],
    ['ScheduleService.create', () => schedules.create({ name: 'nightly', cron: '0 3 * * *', workflow: tasks.nothing })],
    ['ScheduleService.trigger', () => schedules.trigger('nightly')],
    ['ScheduleService.pause', () => schedules.pause('nightly')],
    ['ScheduleService.list', () => schedules.list()],
  ];
}

/** Runs every call and tells, per call, its error's class and the SQLSTATE of its cause. */
async function outcomesOf(calls: Array<[string, () => Promise<unknown>]>): Promise<unknown[]> {
  const outcomes: unknown[] = [];
  for (const [name, call] of calls) {
    const error = await failureOf(call);
    outcomes.push([name, (error as Error).constructor.name, causeCode(error)]);
  }
  return outcomes;
}

/** Waits until a call on a new connection is refused with `code` (sessions opened before may still answer). */
async function refusedWith(queues: QueueService, code: string): Promise<unknown> {
  return waitFor(
    async () => {
      const error = await failureOf(() => queues.list());
      return causeCode(error) === code && error;
    },
    { what: `a call refused with ${code}` },
  );
}

/** Asserts that the HTTP API answers 503 with Retry-After for an enqueue and a status read. */
async function expectServiceUnavailable(app: INestApplication, workflowId: string): Promise<void> {
  for (const answer of [
    await request(app.getHttpServer()).post('/tasks/refused'),
    await request(app.getHttpServer()).get(`/tasks/${workflowId}`),
  ]) {
    expect(answer.status).toBe(503);
    expect(answer.headers['retry-after']).toBe('5');
    expect(answer.body).toMatchObject({ statusCode: 503, error: 'Service Unavailable' });
  }
}

/** Asserts that an enqueue over HTTP works again and that its workflow runs to SUCCESS. */
async function expectWorkingAgain(app: INestApplication, queues: QueueService, value: string): Promise<void> {
  const created = await request(app.getHttpServer()).post(`/tasks/${value}`);
  expect(created.status).toBe(201);
  const handle = await queues.retrieve(created.body.workflowId);
  await expect(handle.getResult({ timeoutMs: 10_000 })).resolves.toBe(value);
  await expect(handle.getStatus()).resolves.toMatchObject({ status: 'SUCCESS' });
  const status = await request(app.getHttpServer()).get(`/tasks/${created.body.workflowId}`);
  expect(status.body).toMatchObject({ workflowId: created.body.workflowId, status: 'SUCCESS' });
}

describe('a database that is not accepting connections (55000, ALLOW_CONNECTIONS false)', () => {
  const database = uniqueSchema('connrefused');
  const url = () => databaseUrlOf(database);
  const logger = new CapturingLogger();
  const uncaught: unknown[] = [];
  const onUncaught = (error: unknown) => uncaught.push(error);
  let admin: Pool;
  let app: INestApplication;
  let queues: QueueService;
  let tasks: RecordingTasks;
  let dueDuringRefusal: WorkflowHandle<unknown>;
  let dueAt: number;

  const allowConnections = (allowed: boolean) =>
    admin.query(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS ${allowed}`);

  beforeAll(async () => {
    process.on('uncaughtException', onUncaught);
    admin = testPool();
    await admin.query(`CREATE DATABASE "${database}"`);
    app = await startApp(url(), logger);
    queues = app.get(QueueService);
    tasks = app.get(RecordingTasks);
  });

  afterAll(async () => {
    process.off('uncaughtException', onUncaught);
    await allowConnections(true);
    await app?.close();
    await admin.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    await admin.end();
  });

  it('runs workflows before the refusal', async () => {
    await expectWorkingAgain(app, queues, 'before');
  });

  it('answers every public call with DatabaseUnavailableError whose cause is the driver error', async () => {
    dueAt = Date.now() + 1000;
    dueDuringRefusal = await queues.enqueue('tasks', tasks.echo, ['due-during-refusal'], { runAt: new Date(dueAt) });
    await allowConnections(false);
    await endSessions(admin, database);
    const first = await refusedWith(queues, '55000');
    expect(first).toBeInstanceOf(DatabaseUnavailableError);
    expect((first as DatabaseUnavailableError).cause).toBeInstanceOf(DatabaseError);
    expect((first as DatabaseUnavailableError).cause).toMatchObject({
      code: '55000',
      message: `database "${database}" is not currently accepting connections`,
    });
    const calls = publicCalls(app, dueDuringRefusal);
    expect(await outcomesOf(calls)).toEqual(calls.map(([name]) => [name, 'DatabaseUnavailableError', '55000']));
  });

  it('answers 503 with Retry-After over HTTP through DedupExceptionFilter', async () => {
    await expectServiceUnavailable(app, dueDuringRefusal.workflowId);
  });

  it('logs the refusal once as an outage, while the worker keeps trying without crashing', async () => {
    const outage = logger.matching(/is unreachable/);
    expect(outage).toHaveLength(1);
    // NOTE: the first failure may be a statement on a session that was being ended (57P01) rather than a refusal.
    expect(outage[0]).toMatchObject({
      level: 'warn',
      message: expect.stringMatching(
        /is unreachable \((55000: database ".*" is not currently accepting connections|57P01|Connection terminated)/,
      ),
    });
    const others = logger
      .matching(/not currently accepting connections/)
      .filter((line) => !/is unreachable|LISTEN connection is lost/.test(line.message));
    expect(others).toEqual([]);
    expect(logger.lines.some((line) => /\n\s+at /.test(line.message))).toBe(false);
    expect(uncaught).toEqual([]);
  });

  it('fails a boot at once with DatabaseUnavailableError when retryAttempts is 0', async () => {
    const error = await failureOf(() => bootOn(url(), logger, { worker: false }));
    expect(error).toBeInstanceOf(DatabaseUnavailableError);
    expect((error as DatabaseUnavailableError).cause).toMatchObject({ code: '55000' });
    expect((error as Error).message).toMatch(/after 1 attempt\(s\)/);
  });

  it('resumes once connections are allowed again: work due meanwhile runs, new work runs, a retrying boot succeeds', async () => {
    const booting = bootOn(url(), logger, { worker: false, retryAttempts: 100, retryDelay: 100 });
    const retry = await waitFor(() => logger.matching(/Unable to connect to Postgres/)[0], {
      what: 'a boot attempt refused',
    });
    expect(retry.message).toMatch(/55000: database ".*" is not currently accepting connections.*Retrying \(1\/100\)/);
    await waitFor(() => Date.now() > dueAt + 200, { what: 'the delayed workflow to be due' });
    expect(tasks.calls.filter((call) => call.args[0] === 'due-during-refusal')).toEqual([]);

    await allowConnections(true);
    const booted = await booting;
    await booted.close();
    await expect(dueDuringRefusal.getResult({ timeoutMs: 10_000 })).resolves.toBe('due-during-refusal');
    await expectWorkingAgain(app, queues, 'after');
    await waitFor(() => logger.matching(/is reachable again/).length === 1, { what: 'the line saying it is back' });
    expect(logger.matching(/is unreachable/)).toHaveLength(1);
    expect(uncaught).toEqual([]);
  });
});

describe('a connection limit reached (53300) by a role that is not a superuser', () => {
  // NOTE: superusers are exempt from database and role CONNECTION LIMITs, so the application connects as a role of
  // this file's own, which owns this file's own database.
  const database = uniqueSchema('connlimit');
  const role = `${database}_app`;
  let admin: Pool;
  let app: INestApplication;
  let queues: QueueService;
  let tasks: RecordingTasks;

  beforeAll(async () => {
    admin = testPool();
    await admin.query(`CREATE ROLE "${role}" LOGIN`);
    await admin.query(`CREATE DATABASE "${database}" OWNER "${role}"`);
    app = await startApp(databaseUrlOf(database, role), new CapturingLogger());
    queues = app.get(QueueService);
    tasks = app.get(RecordingTasks);
  });

  afterAll(async () => {
    await admin.query(`ALTER ROLE "${role}" LOGIN CONNECTION LIMIT -1`);
    await admin.query(`ALTER DATABASE "${database}" CONNECTION LIMIT -1`);
    await app?.close();
    await admin.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    await admin.query(`DROP ROLE IF EXISTS "${role}"`);
    await admin.end();
  });

  it.each([
    ['database', 'too many connections for database', () => `ALTER DATABASE "${database}" CONNECTION LIMIT`],
    ['role', 'too many connections for role', () => `ALTER ROLE "${role}" CONNECTION LIMIT`],
  ])(
    "the %s's CONNECTION LIMIT: DatabaseUnavailableError and 503 while reached, then work resumes",
    async (kind, message, limit) => {
      const handle = await queues.enqueue('tasks', tasks.echo, ['held'], { delayMs: 60_000 });
      await admin.query(`${limit()} 0`);
      try {
        await endSessions(admin, database);
        const first = await refusedWith(queues, '53300');
        expect((first as DatabaseUnavailableError).cause).toBeInstanceOf(DatabaseError);
        expect((first as DatabaseUnavailableError).cause).toMatchObject({
          message: expect.stringContaining(message),
        });
        const calls = publicCalls(app, handle);
        expect(await outcomesOf(calls)).toEqual(calls.map(([name]) => [name, 'DatabaseUnavailableError', '53300']));
        await expectServiceUnavailable(app, handle.workflowId);
      } finally {
        await admin.query(`${limit()} -1`);
      }
      await expectWorkingAgain(app, queues, `after-${kind}-limit`);
      await expect(queues.cancel(handle.workflowId)).resolves.toBe('CANCELLED');
    },
  );

  it('keeps a role that may no longer log in (28000) a DatabaseQueryError and 500: trying again does not cure it', async () => {
    await admin.query(`ALTER ROLE "${role}" NOLOGIN`);
    try {
      await endSessions(admin, database);
      const first = await refusedWith(queues, '28000');
      expect(first).toBeInstanceOf(DatabaseQueryError);
      expect(first).toMatchObject({ code: '28000' });
      const answer = await request(app.getHttpServer()).post('/tasks/refused');
      expect(answer.status).toBe(500);
      expect(answer.headers['retry-after']).toBeUndefined();
    } finally {
      await admin.query(`ALTER ROLE "${role}" LOGIN`);
    }
    await expectWorkingAgain(app, queues, 'after-nologin');
  });
});
