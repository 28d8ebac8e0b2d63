import { Injectable, Module, Scope } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  DedupQueueConfigurationError,
  DedupQueueModule,
  DedupQueueModuleOptions,
  QueueService,
  Workflow,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { DataSource } from 'typeorm';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { startQueueApp } from './support/queue-app';
import { RecordingTasks } from './fixtures/recording-tasks';

@Injectable()
class FirstJobs {
  @Workflow({ name: 'same' })
  async run(): Promise<void> {}
}

@Injectable()
class SecondJobs {
  @Workflow({ name: 'same' })
  async go(): Promise<void> {}
}

@Injectable({ scope: Scope.REQUEST })
class PerRequestJobs {
  @Workflow()
  async run(): Promise<void> {}
}

describe('module boot', () => {
  const schema = uniqueSchema('boot');
  let pool: Pool;

  beforeAll(() => {
    pool = testPool();
  });

  afterAll(async () => {
    await dropSchema(pool, schema);
    await pool.end();
  });

  const boot = async (
    options: Partial<DedupQueueModuleOptions>,
    providers: Array<new (...args: never[]) => unknown> = [],
  ) => {
    const module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: databaseUrl() },
          schema,
          queues: [{ name: 'tasks' }],
          ...options,
        }),
      ],
      providers,
    }).compile();
    await module.init();
    return module;
  };

  it('registers workflows as ClassName.methodName unless named', async () => {
    const app = await startQueueApp({ schema }, [RecordingTasks]);
    try {
      await expect((await app.queues.enqueue('tasks', 'RecordingTasks.echo', ['by name'])).getResult()).resolves.toBe(
        'by name',
      );
      await expect((await app.queues.enqueue('tasks', 'custom-name', [])).getResult()).resolves.toBe('named');
      const byReference = await app.queues.enqueue('tasks', app.get(RecordingTasks).named, []);
      await expect(byReference.getStatus()).resolves.toMatchObject({ workflowName: 'custom-name' });
    } finally {
      await app.close();
    }
  });

  it('fails the boot when two workflows share a name, saying where and what to change', async () => {
    const error = await boot({}, [FirstJobs, SecondJobs]).catch((caught) => caught);
    expect(error).toBeInstanceOf(DedupQueueConfigurationError);
    expect(error.message).toContain('Two workflows are named "same" (FirstJobs.run and SecondJobs.go)');
    expect(error.message).toContain("@Workflow({ name: '...' })");
  });

  it('fails the boot for a workflow on a request-scoped provider', async () => {
    await expect(boot({}, [PerRequestJobs])).rejects.toThrow(
      /PerRequestJobs has @Workflow\(\) methods but is request-scoped.*make PerRequestJobs a singleton/,
    );
  });

  it.each<[string, Partial<DedupQueueModuleOptions>, RegExp]>([
    ['neither connection nor dataSource', { connection: undefined }, /exactly one of `connection` and `dataSource`/],
    [
      'a connection URL that is undefined (DATABASE_URL unset), before any connect attempt',
      { connection: { url: undefined }, retryAttempts: 100 },
      /`connection\.url` is undefined \(is the environment variable it is read from, such as DATABASE_URL, set\?\)\. Pass a Postgres URL: forRoot\(\{ connection: \{ url: 'postgres:\/\//,
    ],
    ['an empty connection URL', { connection: { url: '' } }, /`connection\.url` is an empty string .*DATABASE_URL/],
    ['an invalid schema name', { schema: 'Bad-Name' }, /schema "Bad-Name" must be/],
    ['a queue declared twice', { queues: [{ name: 'a' }, { name: 'a' }] }, /queue "a" is declared twice/],
    [
      'a zero concurrency',
      { queues: [{ name: 'a', concurrency: 0 }] },
      /queues\["a"\]\.concurrency` must be a positive integer/,
    ],
    [
      'a fractional workerConcurrency',
      { queues: [{ name: 'a', workerConcurrency: 1.5 }] },
      /workerConcurrency` must be a positive integer/,
    ],
    [
      'an unknown option, naming the near miss',
      { leaseMS: 5000 } as never,
      /`leaseMS` is not an option; did you mean "leaseMs"\?/,
    ],
    [
      'an unknown queue option',
      { queues: [{ name: 'a', concurency: 2 }] } as never,
      /`queues\["a"\]\.concurency` is not an option; did you mean "concurrency"\?/,
    ],
    [
      'an unknown rate limit option',
      { queues: [{ name: 'a', rateLimit: { limit: 1, period: 5 } }] } as never,
      /rateLimit\.period` is not an option; did you mean "periodMs"\?/,
    ],
  ])('refuses %s with a message naming the option', async (_, options, message) => {
    const error = await boot(options).catch((caught) => caught);
    expect(error).toBeInstanceOf(DedupQueueConfigurationError);
    expect(error.message).toMatch(message);
  });

  it('builds its options with forRootAsync and an injected factory', async () => {
    @Module({
      providers: [{ provide: 'QUEUE_SETTINGS', useValue: { schema, queue: 'async_tasks' } }],
      exports: ['QUEUE_SETTINGS'],
    })
    class SettingsModule {}
    const module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRootAsync({
          imports: [SettingsModule],
          inject: ['QUEUE_SETTINGS'],
          useFactory: (settings: { schema: string; queue: string }) => ({
            connection: { url: databaseUrl() },
            schema: settings.schema,
            queues: [{ name: settings.queue }],
          }),
        }),
      ],
      providers: [RecordingTasks],
    }).compile();
    await module.init();
    try {
      const handle = await module.get(QueueService).enqueue('async_tasks', module.get(RecordingTasks).echo, ['async']);
      await expect(handle.getResult()).resolves.toBe('async');
    } finally {
      await module.close();
    }
  });

  it("shares an application's TypeORM DataSource from @nestjs/typeorm and leaves it open on close", async () => {
    const module = await Test.createTestingModule({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: databaseUrl(), poolSize: 3 }),
        DedupQueueModule.forRootAsync({
          inject: [DataSource],
          useFactory: (dataSource: DataSource) => ({ dataSource, schema, queues: [{ name: 'tasks' }] }),
        }),
      ],
      providers: [RecordingTasks],
    }).compile();
    await module.init();
    const dataSource = module.get(DataSource);
    try {
      const handle = await module.get(QueueService).enqueue('tasks', module.get(RecordingTasks).echo, ['shared pool']);
      await expect(handle.getResult()).resolves.toBe('shared pool');
      const { application_name } = (
        await dataSource.query('SELECT current_setting($1) AS application_name', ['application_name'])
      )[0];
      expect(application_name).not.toBe('nest-dedup-queue');
    } finally {
      await module.close();
    }
    expect(dataSource.isInitialized).toBe(false);
  });

  it('adopts a standalone DataSource, initializing it if needed, and never destroys it', async () => {
    const dataSource = new DataSource({ type: 'postgres', url: databaseUrl() });
    const app = await startQueueApp({ schema, connection: undefined, dataSource }, [RecordingTasks]);
    try {
      await expect((await app.queues.enqueue('tasks', app.get(RecordingTasks).echo, [1])).getResult()).resolves.toBe(1);
    } finally {
      await app.close();
    }
    expect(dataSource.isInitialized).toBe(true);
    await expect(dataSource.query('SELECT 1 AS one')).resolves.toEqual([{ one: 1 }]);
    await dataSource.destroy();
  });
});
