/**
 * Isolated workflows (`@Workflow({ isolate: 'thread' })`) in a real Nest application over HTTP, on a real Postgres:
 * a CPU-bound body runs in a worker thread while the application answers and keeps its lease; a cancel, a timeout,
 * a supersede or shutdown stops a body that ignores its signal by terminating its thread; a body past its memory cap
 * fails its attempt and the process lives on; the workflow API works inside with the same records as in process;
 * a thread builds a provider with dependencies from its own module, and one it cannot build is a boot error.
 */
import { Controller, Get, INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  DedupQueueConfigurationError,
  DedupQueueModule,
  DedupQueueModuleOptions,
  QueueService,
  WorkflowHandle,
} from 'nest-dedup-queue';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Pool } from 'pg';
import request from 'supertest';
import {
  ISOLATION_EXEC_ARGV,
  InjectedTasks,
  IsolatedTasks,
  Multiplier,
  UnbuildableTasks,
  closedThreadsDir,
} from './fixtures/isolated-tasks';
import { HIDDEN_PROVIDERS } from './fixtures/isolated-unexported';
import { CapturingLogger } from './support/capturing-logger';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

/** Keeps each line's context too: the thread's lines must arrive with theirs. */
class ContextCapturingLogger extends CapturingLogger {
  readonly contexts: Array<{ message: string; context: unknown }> = [];
  override log(message: unknown, context?: unknown): void {
    super.log(message);
    this.contexts.push({ message: String(message), context });
  }
}

@Controller()
class PingController {
  @Get('ping')
  ping(): string {
    return 'pong';
  }
}

/**
 * A body its thread stops is stopped this soon: a grace of 500 ms, then the thread is terminated (the machine is
 * shared, and timers run late under load). A body that is not stopped never stops: `stoppedGrowing` times out.
 */
const STOPPED_WITHIN_MS = 6000;
const ISOLATION = { threads: 2, execArgv: ISOLATION_EXEC_ARGV, resourceLimits: { maxOldGenerationSizeMb: 96 } };

describe('isolated workflows', () => {
  const schema = uniqueSchema('isolation');
  const logger = new ContextCapturingLogger();
  logger.setLogLevels(['log', 'warn', 'error', 'fatal']);
  const files = mkdtempSync(join(tmpdir(), 'isolation-'));
  let pool: Pool;
  let app: INestApplication;
  let queues: QueueService;
  let tasks: IsolatedTasks;

  beforeAll(async () => {
    pool = testPool();
    const module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: databaseUrl() },
          schema,
          queues: [{ name: 'tasks' }, { name: 'single', workerConcurrency: 1 }],
          leaseMs: 3000,
          heartbeatIntervalMs: 1000,
          isolation: ISOLATION,
        }),
      ],
      controllers: [PingController],
      providers: [IsolatedTasks, InjectedTasks, Multiplier, { provide: 'FACTOR', useValue: 5 }],
    }).compile();
    app = module.createNestApplication({ logger });
    await app.init();
    queues = app.get(QueueService);
    tasks = app.get(IsolatedTasks);
  });

  afterAll(async () => {
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
    rmSync(files, { recursive: true, force: true });
  });

  const statusOf = async (handle: WorkflowHandle) => handle.getStatus();
  const waitForStatus = (handle: WorkflowHandle, status: string, timeoutMs = 20_000) =>
    waitFor(async () => ((await statusOf(handle)).status === status ? true : undefined), {
      timeoutMs,
      what: `${handle.workflowId} ${status}`,
    });
  const heartbeatAt = async () =>
    (await pool.query<{ at: Date }>(`SELECT max(heartbeat_at) AS at FROM "${schema}".executors`)).rows[0].at.getTime();
  const stepsOf = async (workflowId: string) =>
    (
      await pool.query<{ step_name: string }>(
        `SELECT step_name FROM "${schema}".steps WHERE workflow_id = $1 ORDER BY step_index`,
        [workflowId],
      )
    ).rows.map((row) => row.step_name);

  /** Starts `spinForever` and resolves once its body is appending to its file. */
  const startSpinning = async (name: string, enqueue: (file: string) => Promise<WorkflowHandle>) => {
    const file = join(files, name);
    const handle = await enqueue(file);
    await queues.getEvent(handle.workflowId, 'spinning', { timeoutMs: 20_000 });
    await waitFor(() => sizeOf(file) > 0, { what: `${name} appending` });
    return { handle, file };
  };

  /** Resolves with when the file stopped growing (its size unchanged for 400 ms). */
  const stoppedGrowing = async (file: string) => {
    let size = sizeOf(file);
    let since = Date.now();
    await waitFor(
      () => {
        const now = sizeOf(file);
        if (now !== size) [size, since] = [now, Date.now()];
        return Date.now() - since >= 400;
      },
      { timeoutMs: 15_000, what: `${file} to stop growing` },
    );
    return since;
  };

  it('runs a CPU-bound body in a worker thread: HTTP answers, other workflows run, heartbeats keep the lease', async () => {
    // NOTE: 4 s without yielding: longer than the lease, which a body on the main thread would lose.
    const spins = await Promise.all([1, 2].map(() => queues.enqueue('tasks', tasks.spin, [4000])));
    await Promise.all(spins.map((spin) => waitForStatus(spin, 'PENDING')));
    const beatBefore = await heartbeatAt();
    const latencies: number[] = [];
    const until = Date.now() + 2500;
    while (Date.now() < until) {
      const sent = performance.now();
      await request(app.getHttpServer()).get('/ping').expect(200, 'pong');
      latencies.push(performance.now() - sent);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const quick = await queues.enqueue('tasks', tasks.quick, []);
    expect(await quick.getResult({ timeoutMs: 5000 })).toEqual({ threadId: 0, isMainThread: true });
    expect((await Promise.all(spins.map(statusOf))).map((status) => status.status)).toEqual(['PENDING', 'PENDING']);
    const beatDuring = await heartbeatAt();

    const results = await Promise.all(spins.map((spin) => spin.getResult({ timeoutMs: 20_000 })));
    // NOTE: on the main thread, each body would hold every request up for 4 s; a loaded machine answers slowly too.
    expect(Math.max(...latencies)).toBeLessThan(2500);
    expect(latencies.length).toBeGreaterThanOrEqual(3);
    expect(beatDuring - beatBefore).toBeGreaterThanOrEqual(1000);
    expect(results.map((result) => result.isMainThread)).toEqual([false, false]);
    expect(new Set(results.map((result) => result.threadId)).size).toBe(2);
    for (const spin of spins) {
      expect(await statusOf(spin)).toMatchObject({ status: 'SUCCESS', attempts: 1 });
    }
  });

  it('cancel stops a body that ignores its signal: its thread ends, its slot frees at once, nothing more is recorded', async () => {
    const { handle, file } = await startSpinning('cancelled', (path) =>
      queues.enqueue('single', tasks.spinForever, [path]),
    );
    const cancelledAt = Date.now();
    await queues.cancel(handle.workflowId);
    const next = await queues.enqueue('single', tasks.echo, ['next']);
    expect(await next.getResult({ timeoutMs: 10_000 })).toMatchObject({ args: ['next'] });

    expect((await stoppedGrowing(file)) - cancelledAt).toBeLessThan(STOPPED_WITHIN_MS);
    await waitFor(() => queues.abandonedRuns().length === 0, { what: 'no abandoned body' });
    expect(await statusOf(handle)).toMatchObject({ status: 'CANCELLED' });
    expect(await stepsOf(handle.workflowId)).toEqual(['setEvent spinning']);
  });

  it('a timeoutMs stops it the same way', async () => {
    const { handle, file } = await startSpinning('timed-out', (path) =>
      queues.enqueue('single', tasks.spinForever, [path], { timeoutMs: 1500 }),
    );
    await waitForStatus(handle, 'CANCELLED');
    const timedOutAt = Date.now();
    expect((await stoppedGrowing(file)) - timedOutAt).toBeLessThan(STOPPED_WITHIN_MS);
    expect((await statusOf(handle)).error).toMatchObject({ name: 'WorkflowTimeoutError' });
    expect(await stepsOf(handle.workflowId)).toEqual(['setEvent spinning']);
  });

  it('a supersede stops it the same way', async () => {
    const { handle, file } = await startSpinning('superseded', (path) =>
      queues.enqueue('single', tasks.spinForever, [path], { deduplicationId: 'one-at-a-time' }),
    );
    const successor = await queues.enqueue('single', tasks.echo, ['successor'], {
      deduplicationId: 'one-at-a-time',
      onDuplicate: 'supersede',
    });
    const supersededAt = Date.now();
    // Watched from the supersede on: the successor's own run (slow under load) is not part of the stop.
    const stopped = stoppedGrowing(file);
    expect(await successor.getResult({ timeoutMs: 10_000 })).toMatchObject({ args: ['successor'] });
    expect((await stopped) - supersededAt).toBeLessThan(STOPPED_WITHIN_MS);
    expect(await statusOf(handle)).toMatchObject({ status: 'CANCELLED', supersededBy: successor.workflowId });
  });

  it('a body past its memory cap fails its attempt with WorkflowThreadError; retries apply; the process lives on', async () => {
    const once = await queues.enqueue('tasks', tasks.hogOnce, []);
    await waitForStatus(once, 'ERROR', 60_000);
    const { error } = await statusOf(once);
    expect(error).toMatchObject({ name: 'WorkflowThreadError', fields: { failure: 'resource-limits' } });
    expect(error?.message).toMatch(/went past its resourceLimits/);

    const retried = await queues.enqueue('tasks', tasks.hog, []);
    expect(await retried.getResult({ timeoutMs: 60_000 })).toBe('survived');
    expect(await statusOf(retried)).toMatchObject({ status: 'SUCCESS', attempts: 2 });
    const after = await queues.enqueue('tasks', tasks.echo, ['after']);
    expect(await after.getResult({ timeoutMs: 10_000 })).toMatchObject({ args: ['after'] });
  });

  it('offers the workflow API inside, recorded as in any other body', async () => {
    const tour = await queues.enqueue('tasks', tasks.tour, [{ n: 21 }]);
    expect(await queues.getEvent(tour.workflowId, 'progress', { timeoutMs: 20_000 })).toEqual({ doubled: 42 });
    await waitFor(async () => (await stepsOf(tour.workflowId)).includes('recv deadline'), { what: 'tour in recv' });
    await queues.send(tour.workflowId, { hello: 'world' }, { topic: 'greetings' });
    const result = await tour.getResult({ timeoutMs: 30_000 });

    expect(result).toMatchObject({
      doubled: 42,
      flaky: { tries: 2, at: '1970-01-01T00:00:00.000Z' },
      message: { hello: 'world' },
      childResult: { args: ['from-parent', 21], ranIn: { isMainThread: false } },
      ranIn: { isMainThread: false },
    });
    const child = await queues.retrieve(result.child as string);
    expect(await child.getStatus()).toMatchObject({ status: 'SUCCESS', parentWorkflowId: tour.workflowId });
    expect(await stepsOf(tour.workflowId)).toEqual([
      'IsolatedTasks.double',
      'flaky',
      'setEvent progress',
      'sleep',
      'enqueue IsolatedTasks.echo',
      'recv deadline',
      'recv',
      `getResult ${result.child as string}`,
    ]);
    expect(logger.contexts).toContainEqual({
      message: `tour of ${tour.workflowId} enqueued ${result.child as string}`,
      context: 'IsolatedTasks',
    });

    const transactional = await queues.enqueue('tasks', tasks.transactional, []);
    await waitForStatus(transactional, 'ERROR');
    expect((await statusOf(transactional)).error?.message).toMatch(
      /transactional, which an isolated body .* cannot run/,
    );
  });

  it('records a patch (patched, of issue 31) in an isolated body as in any other', async () => {
    const handle = await queues.enqueue('tasks', tasks.patchedNap, []);
    expect(await handle.getResult({ timeoutMs: 20_000 })).toEqual({ before: true, after: true });
    expect(await stepsOf(handle.workflowId)).toEqual(['patch nap-v2', 'sleep', 'patch after-nap']);
  });

  it('writes and reads streams (writeStream, closeStream, readStream, of issue 34) in isolated bodies', async () => {
    const writer = await queues.enqueue('tasks', tasks.streamTokens, [3]);
    const reader = await queues.enqueue('tasks', tasks.readTokens, [writer.workflowId]);
    const expected = [{ i: 0 }, { i: 1 }, { i: 2 }, { done: true }];
    expect(await reader.getResult({ timeoutMs: 30_000 })).toEqual(expected);
    const read: unknown[] = [];
    for await (const { value } of queues.readStream(writer.workflowId, 'tokens')) read.push(value);
    expect(read).toEqual(expected);
    expect(await stepsOf(writer.workflowId)).toEqual([
      'writeStream tokens',
      'writeStream tokens',
      'writeStream tokens',
      'sleep',
      'writeStream tokens',
      'closeStream tokens',
    ]);
  });

  it('passes arguments and results as JSON, as storage does', async () => {
    const handle = await queues.enqueue('tasks', tasks.echo, [new Date(0), { nested: [1, 'two'] }, null]);
    expect(await handle.getResult({ timeoutMs: 10_000 })).toMatchObject({
      args: ['1970-01-01T00:00:00.000Z', { nested: [1, 'two'] }, null],
    });
  });

  it('builds a provider with dependencies in the thread from its threadModule', async () => {
    const injected = app.get(InjectedTasks);
    const handle = await queues.enqueue('tasks', injected.multiply, [7]);
    // NOTE: the thread's module provides the factor 3; the application's (main thread) provides 5.
    expect(await handle.getResult({ timeoutMs: 20_000 })).toEqual({
      product: 21,
      ranIn: { threadId: expect.any(Number) as number, isMainThread: false },
      hasQueueService: true,
    });
  });

  it('stops a body that ignores its signal at shutdown past shutdownGraceMs; the workflow stays PENDING', async () => {
    const ownSchema = uniqueSchema('isolation_shutdown');
    const own = await startQueueApp({ schema: ownSchema, shutdownGraceMs: 300, isolation: ISOLATION }, [IsolatedTasks]);
    try {
      const file = join(files, 'shutdown');
      const handle = await own.queues.enqueue('tasks', own.get(IsolatedTasks).spinForever, [file]);
      await own.queues.getEvent(handle.workflowId, 'spinning', { timeoutMs: 20_000 });
      await waitFor(() => sizeOf(file) > 0, { what: 'appending' });
      const closing = Date.now();
      await own.close();
      expect(Date.now() - closing).toBeLessThan(5000);
      expect((await stoppedGrowing(file)) - closing).toBeLessThan(STOPPED_WITHIN_MS);
      const row = await pool.query(`SELECT status FROM "${ownSchema}".workflows WHERE workflow_id = $1`, [
        handle.workflowId,
      ]);
      expect(row.rows).toEqual([{ status: 'PENDING' }]);
    } finally {
      await dropSchema(pool, ownSchema);
    }
  });

  it('recycles a thread after maxRunsPerThread runs, and ends a thread idle for idleTimeoutMs', async () => {
    const ownSchema = uniqueSchema('isolation_recycle');
    mkdirSync(closedThreadsDir());
    const closed = (thread: number) => existsSync(join(closedThreadsDir(), String(thread)));
    const isolation = { ...ISOLATION, threads: 1, maxRunsPerThread: 3, idleTimeoutMs: 1500 };
    const own = await startQueueApp({ schema: ownSchema, isolation }, [IsolatedTasks]);
    try {
      const threadOfRun = async () => {
        const handle = await own.queues.enqueue('tasks', own.get(IsolatedTasks).echo, []);
        return (await handle.getResult({ timeoutMs: 20_000 })).ranIn.threadId;
      };
      // NOTE: the first thread checked the workflows at boot (one lending), so it serves two runs before it is recycled.
      const [first, second, third] = [await threadOfRun(), await threadOfRun(), await threadOfRun()];
      expect(second).toBe(first);
      expect(third).not.toBe(second);
      await waitFor(() => closed(first), { what: `thread ${first} recycled, its providers closed` });
      expect(closed(third)).toBe(false);
      await waitFor(() => closed(third), { what: `thread ${third} ended idle, its providers closed` });
      const afterIdle = await threadOfRun();
      expect(new Set([first, third, afterIdle]).size).toBe(3);
    } finally {
      rmSync(closedThreadsDir(), { recursive: true, force: true });
      await own.close();
      await dropSchema(pool, ownSchema);
    }
  });

  it('refuses at boot, naming the fix, a provider a thread cannot build, a class it cannot find, bad options', async () => {
    const boot = async (providers: unknown[], options: Partial<DedupQueueModuleOptions> = {}) => {
      const schema = uniqueSchema('isolation_boot');
      try {
        const started = await startQueueApp({ schema, isolation: ISOLATION, ...options }, providers as never);
        await started.close();
        throw new Error('the app booted');
      } catch (error) {
        return error as Error;
      } finally {
        await dropSchema(pool, schema);
      }
    };
    const unbuildable = await boot([UnbuildableTasks, Multiplier, { provide: 'FACTOR', useValue: 2 }]);
    expect(unbuildable).toBeInstanceOf(DedupQueueConfigurationError);
    expect(unbuildable.message).toMatch(/UnbuildableTasks\.run: .*threadModule: \(\) => MyThreadModule/);
    const hidden = await boot(HIDDEN_PROVIDERS);
    expect(hidden).toBeInstanceOf(DedupQueueConfigurationError);
    expect(hidden.message).toMatch(/isolated-unexported\.ts does not export HiddenTasks; export the class/);
    const misspelt = await boot([], { isolation: { thread: 2 } as never });
    expect(misspelt).toBeInstanceOf(DedupQueueConfigurationError);
    expect(misspelt.message).toMatch(/`isolation.thread` is not an option; did you mean "threads"\?/);
    const noThreads = await boot([], { isolation: { threads: 0 } });
    expect(noThreads.message).toMatch(/`isolation.threads` must be a positive integer/);
  });
});

function sizeOf(file: string): number {
  try {
    return statSync(file).size;
  } catch {
    return 0;
  }
}
