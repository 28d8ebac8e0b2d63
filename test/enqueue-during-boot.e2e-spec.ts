/**
 * When during a Nest application's boot an enqueue is safe, in a real application (NestFactory): before `app.init()`
 * it is refused with `ModuleNotInitialisedError` and writes nothing; from an application's own `onModuleInit` it
 * works, but the workers start only at `onApplicationBootstrap`, so awaiting the result there times out.
 */
import { Injectable, INestApplication, Module, OnModuleInit } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  DedupQueueModule,
  EnqueuedWorkflowHandle,
  ModuleNotInitialisedError,
  QueueService,
  Workflow,
  WorkflowResultTimeoutError,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';

@Injectable()
class BootTasks {
  @Workflow({ queue: 'tasks' })
  async greet(name: string): Promise<string> {
    return `hello ${name}`;
  }
}

/** Enqueues in its `onModuleInit`, and waits a little for the result there (it cannot come before bootstrap). */
@Injectable()
class BootEnqueuer implements OnModuleInit {
  handle?: EnqueuedWorkflowHandle<string>;
  awaitedInInit?: unknown;

  constructor(
    private readonly queues: QueueService,
    private readonly tasks: BootTasks,
  ) {}

  async onModuleInit(): Promise<void> {
    this.handle = await this.queues.enqueue(this.tasks.greet, ['from onModuleInit']);
    this.awaitedInInit = await this.handle.getResult({ timeoutMs: 300 }).catch((error: unknown) => error);
  }
}

describe('enqueueing during boot', () => {
  const schema = uniqueSchema('boot_enqueue');
  let pool: Pool;
  let app: INestApplication;

  beforeAll(async () => {
    pool = testPool();
    @Module({
      imports: [DedupQueueModule.forRoot({ connection: { url: databaseUrl() }, schema, queues: [{ name: 'tasks' }] })],
      providers: [BootTasks, BootEnqueuer],
    })
    class AppModule {}
    app = await NestFactory.create(AppModule, { logger: false });
  });

  afterAll(async () => {
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('refuses an enqueue before app.init() with ModuleNotInitialisedError, by method, by name or into the default queue', async () => {
    const queues = app.get(QueueService);
    const tasks = app.get(BootTasks);
    const early = [
      () => queues.enqueue('tasks', tasks.greet, ['too early']),
      () => queues.enqueue('tasks', 'BootTasks.greet', ['too early']),
      () => queues.enqueue(tasks.greet, ['too early']),
    ];
    for (const enqueue of early) {
      const error = await enqueue().catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(ModuleNotInitialisedError);
      expect((error as Error).message).toBe(
        'DedupQueueModule is not initialised yet: call app.init() or listen() first (an enqueue works from ' +
          "an application's onModuleInit on; workers start at onApplicationBootstrap)",
      );
    }
  });

  it("takes an enqueue from an application's onModuleInit; its result comes once the workers start", async () => {
    await app.init();
    const enqueuer = app.get(BootEnqueuer);
    expect(enqueuer.awaitedInInit).toBeInstanceOf(WorkflowResultTimeoutError);
    await expect(enqueuer.handle?.getResult({ timeoutMs: 10_000 })).resolves.toBe('hello from onModuleInit');
    const { rows } = await pool.query(`SELECT inputs::text AS inputs, status FROM "${schema}".workflows`);
    expect(rows).toEqual([{ inputs: '["from onModuleInit"]', status: 'SUCCESS' }]);
  });
});
