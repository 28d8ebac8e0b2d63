import type { Provider, Type } from '@nestjs/common';
import { Test, TestingModule } from '@nestjs/testing';
import { DedupQueueModule, DedupQueueModuleOptions, QueueService } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './database';

export interface QueueApp {
  module: TestingModule;
  queues: QueueService;
  get<T>(type: Type<T>): T;
  close(): Promise<void>;
}

/** Boots a Nest application context with DedupQueueModule on the test database and the given providers. */
export async function startQueueApp(
  options: Partial<DedupQueueModuleOptions> & { schema: string },
  providers: Provider[] = [],
): Promise<QueueApp> {
  const module = await Test.createTestingModule({
    imports: [
      DedupQueueModule.forRoot({
        connection: { url: databaseUrl() },
        queues: [{ name: 'tasks' }],
        ...options,
      }),
    ],
    providers,
  }).compile();
  await module.init();
  return {
    module,
    queues: module.get(QueueService),
    get: (type) => module.get(type),
    close: () => module.close(),
  };
}

/** What `useQueueApp` gives a test file; `pool`, `app` and `tasks` are set once its `beforeAll` has run. */
export interface QueueAppSuite<T = unknown> {
  /** The file's own schema (uniqueSchema). */
  readonly schema: string;
  /** A pool for assertions and fixtures (testPool). */
  pool: Pool;
  app: QueueApp;
  /** The app's instance of the `tasks` class given to useQueueApp. */
  tasks: T;
}

/** What a suite's set-up and tear-down need beyond the app's options, depending on the test file. */
export interface QueueAppSuiteHooks<T> {
  /** The provider (one of `providers`) the suite's `tasks` is, usually the file's workflow class. */
  tasks?: Type<T>;
  /** Runs once the app has started (and migrated the schema), e.g. to create the fixture's tables. */
  afterStart?: (suite: QueueAppSuite<T>) => Promise<unknown>;
  /** Runs first in `afterAll`, before the app closes, e.g. to open gates or kill child processes. */
  beforeClose?: () => unknown;
}

/**
 * Registers the usual `beforeAll`/`afterAll` of a test file: a schema of its own (`uniqueSchema(prefix)`), a pool,
 * and an app started with `options` and `providers`; afterwards the app is closed, the schema dropped and the pool
 * ended. Call it at the top of a file or a `describe`, before the file's own hooks.
 */
export function useQueueApp<T = unknown>(
  prefix: string,
  options: Partial<DedupQueueModuleOptions>,
  providers: Provider[] = [],
  hooks: QueueAppSuiteHooks<T> = {},
): QueueAppSuite<T> {
  const suite = { schema: uniqueSchema(prefix) } as QueueAppSuite<T>;

  beforeAll(async () => {
    suite.pool = testPool();
    suite.app = await startQueueApp({ ...options, schema: suite.schema }, providers);
    if (hooks.tasks) suite.tasks = suite.app.get(hooks.tasks);
    await hooks.afterStart?.(suite);
  });

  afterAll(async () => {
    await hooks.beforeClose?.();
    await suite.app?.close();
    await dropSchema(suite.pool, suite.schema);
    await suite.pool.end();
  });

  return suite;
}
