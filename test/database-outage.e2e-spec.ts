import { Test, TestingModule } from '@nestjs/testing';
import { createServer, Server, Socket } from 'node:net';
import {
  DatabaseUnavailableError,
  DedupQueueConfigurationError,
  DedupQueueModule,
  DedupQueueModuleOptions,
  QueueService,
} from 'nest-dedup-queue';
import { startThrowawayPostgres, ThrowawayPostgres } from 'throwaway-postgres';
import { RecordingTasks } from './fixtures/recording-tasks';
import { CapturingLogger } from './support/capturing-logger';
import { databaseUrl } from './support/database';
import { waitFor } from './support/wait-for';

async function boot(options: Partial<DedupQueueModuleOptions>, logger = new CapturingLogger()): Promise<TestingModule> {
  const module = await Test.createTestingModule({
    imports: [DedupQueueModule.forRoot({ queues: [{ name: 'tasks' }], retryAttempts: 0, ...options })],
    providers: [RecordingTasks],
  })
    .setLogger(logger)
    .compile();
  await module.init();
  return module;
}

async function bootFailure(options: Partial<DedupQueueModuleOptions>, logger?: CapturingLogger): Promise<Error> {
  return boot(options, logger).then(
    async (module) => {
      await module.close();
      throw new Error('boot succeeded');
    },
    (error: Error) => error,
  );
}

describe('boot against a database that cannot be reached', () => {
  let blackhole: Server;
  let port: number;
  const sockets = new Set<Socket>();

  beforeAll(async () => {
    blackhole = createServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => undefined);
    });
    await new Promise<void>((resolve) => blackhole.listen(0, '127.0.0.1', resolve));
    port = (blackhole.address() as { port: number }).port;
  });

  afterAll(async () => {
    sockets.forEach((socket) => socket.destroy());
    await new Promise((resolve) => blackhole.close(resolve));
  });

  it('gives up after connectTimeoutMs on a listener that never answers, naming the endpoint but not the password', async () => {
    const started = Date.now();
    const error = await bootFailure({
      connection: { url: `postgres://app:s3cret@127.0.0.1:${port}/orders` },
      connectTimeoutMs: 500,
    });
    expect(error).toBeInstanceOf(DatabaseUnavailableError);
    expect(error.message).toMatch(
      new RegExp(`DedupQueueModule: cannot reach Postgres at 127\\.0\\.0\\.1:${port}/orders as user "app"`),
    );
    expect(error.message).toMatch(/connectTimeoutMs is 500 ms/);
    expect(error.message).not.toMatch(/s3cret/);
    expect((error as DatabaseUnavailableError).cause).toBeDefined();
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("honours the URL's connect_timeout (seconds)", async () => {
    const error = await bootFailure({
      connection: { url: `postgres://app@127.0.0.1:${port}/orders?connect_timeout=1` },
    });
    expect(error).toBeInstanceOf(DatabaseUnavailableError);
    expect(error.message).toMatch(/connectTimeoutMs is 1000 ms/);
  });

  it('tries again retryAttempts times, one line per attempt, then fails', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const closedPort = (closed.address() as { port: number }).port;
    await new Promise((resolve) => closed.close(resolve));
    const logger = new CapturingLogger();
    const error = await bootFailure(
      { connection: { url: `postgres://app@127.0.0.1:${closedPort}/orders` }, retryAttempts: 2, retryDelay: 50 },
      logger,
    );
    expect(error).toBeInstanceOf(DatabaseUnavailableError);
    expect(error.message).toMatch(/after 3 attempt\(s\)/);
    const retries = logger.lines.filter((line) => /Unable to connect to Postgres/.test(line.message));
    expect(retries.map((line) => line.message.match(/Retrying \((\d)\/2\)/)?.[1])).toEqual(['1', '2']);
    expect(retries.every((line) => !line.message.includes('\n'))).toBe(true);
  });

  it('fails at once, without retrying, when the server refuses the database', async () => {
    const url = new URL(databaseUrl());
    url.pathname = '/no_such_database_here';
    const logger = new CapturingLogger();
    const error = await bootFailure(
      { connection: { url: url.toString() }, retryAttempts: 3, retryDelay: 2000 },
      logger,
    );
    expect(error).toBeInstanceOf(DedupQueueConfigurationError);
    expect(error.message).toMatch(/no_such_database_here/);
    expect(logger.lines.filter((line) => /Retrying/.test(line.message))).toHaveLength(0);
  });
});

describe('an outage of a running application', () => {
  let server: ThrowawayPostgres;
  let module: TestingModule;
  let queues: QueueService;
  let tasks: RecordingTasks;
  const logger = new CapturingLogger();
  const uncaught: unknown[] = [];
  const onUncaught = (error: unknown) => uncaught.push(error);

  beforeAll(async () => {
    process.on('uncaughtException', onUncaught);
    server = await startThrowawayPostgres({ startTimeoutMs: 120_000 });
    module = await boot({ connection: { url: server.url }, pollIntervalMs: 100, shutdownGraceMs: 1000 }, logger);
    queues = module.get(QueueService);
    tasks = module.get(RecordingTasks);
  }, 150_000);

  afterAll(async () => {
    process.off('uncaughtException', onUncaught);
    await server?.stop();
  });

  it('works before the outage', async () => {
    await expect((await queues.enqueue('tasks', tasks.echo, ['before'])).getResult()).resolves.toBe('before');
  });

  it('answers every call with DatabaseUnavailableError while the server is gone, never a raw driver error', async () => {
    const running = await queues.enqueue('tasks', tasks.blocked, ['during'], { workflowId: 'during' });
    await waitFor(() => tasks.running === 1, { what: 'the workflow to start' });
    await server.stop();
    const calls: Array<[string, () => Promise<unknown>]> = [
      ['enqueue', () => queues.enqueue('tasks', tasks.echo, ['x'])],
      ['enqueueMany', () => queues.enqueueMany('tasks', tasks.echo, [{ args: ['y'] }])],
      ['retrieve', () => queues.retrieve('during')],
      ['cancel', () => queues.cancel('during')],
      ['list', () => queues.list()],
      ['findByDeduplicationId', () => queues.findByDeduplicationId('tasks', 'k')],
      ['pauseQueue', () => queues.pauseQueue('tasks')],
      ['getStatus', () => running.getStatus()],
      ['getResult', () => running.getResult({ timeoutMs: 300 })],
    ];
    for (const [name, call] of calls) {
      const error = await call().then(
        () => new Error(`${name} succeeded`),
        (caught: unknown) => caught,
      );
      expect([name, error]).toEqual([name, expect.any(DatabaseUnavailableError)]);
      expect((error as DatabaseUnavailableError).cause).toBeDefined();
    }
  });

  it('logs the outage once, with no stack, while workers keep trying', async () => {
    const since = logger.lines.length;
    await new Promise((resolve) => setTimeout(resolve, 2500));
    const lines = logger.lines;
    expect(lines.filter((line) => /is unreachable/.test(line.message))).toHaveLength(1);
    expect(lines.slice(since).filter((line) => line.level !== 'log').length).toBeLessThanOrEqual(2);
    expect(lines.some((line) => /\n\s+at /.test(line.message))).toBe(false);
    expect(uncaught).toEqual([]);
  });

  it('shuts down without crashing while the server is gone', async () => {
    tasks.gate('during').open();
    await module.close();
    expect(uncaught).toEqual([]);
  });
});
