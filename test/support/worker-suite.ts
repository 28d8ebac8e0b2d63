/**
 * The set-up of test files whose workflows run in worker processes (test/fixtures/child-*-worker.ts): a worker-less
 * app of the test's own that enqueues and looks up, the tables the fixture's workflows write to, and starting,
 * SIGKILLing and (after each test, when asked) cleaning up after those processes.
 */
import type { Provider, Type } from '@nestjs/common';
import type { QueueOptions } from 'nest-dedup-queue';
import { FixtureProcess, killFixtures, spawnFixture } from '../fixtures/child-harness';
import { databaseUrl } from './database';
import { QueueAppSuite, useQueueApp } from './queue-app';

export interface WorkerSuiteOptions<T> {
  /** Prefix of the file's own schema. */
  prefix: string;
  /** The queues of the test's app (and the names the workers use). */
  queues: QueueOptions[];
  /** The test's app's providers: the fixture's workflow classes. */
  providers: Provider[];
  /** The provider the suite's `tasks` is (see useQueueApp). */
  tasks?: Type<T>;
  /** The SQL creating the tables the fixture's workflows write to, in the schema. */
  tablesSql: (schema: string) => string;
  /** The worker process, a file in test/fixtures started with SCHEMA and EXECUTOR_ID. */
  worker: string;
  /**
   * After each test: kill the worker processes, delete what is left ENQUEUED or PENDING and the executors, so the
   * next test starts with no live executor and nothing to recover.
   */
  cleanUpAfterEach?: boolean;
}

export interface WorkerSuite<T = unknown> extends QueueAppSuite<T> {
  /** Starts a worker process with `executorId` (also its fixture name) and `env`, without waiting for it to boot. */
  spawnWorker(executorId: string, env?: Record<string, string>): FixtureProcess;
  /** Starts a worker process like `spawnWorker` and waits until it has booted. */
  startWorker(executorId: string, env?: Record<string, string>): Promise<FixtureProcess>;
  /** Kills a worker process with SIGKILL and expects it to have ended by that signal. */
  sigkill(worker: FixtureProcess): Promise<void>;
  /** Inserts `key` into the fixture's `release` table, where its workflows' bodies wait for their key. */
  release(key: string): Promise<unknown>;
}

/** Registers the suite's hooks (useQueueApp's, and the clean-up after each test if asked); call it first. */
export function useWorkerSuite<T = unknown>(options: WorkerSuiteOptions<T>): WorkerSuite<T> {
  const suite = useQueueApp(
    options.prefix,
    { worker: false, connection: { url: databaseUrl(), poolSize: 3 }, queues: options.queues },
    options.providers,
    {
      tasks: options.tasks,
      afterStart: ({ pool, schema }) => pool.query(options.tablesSql(schema)),
      beforeClose: killFixtures,
    },
  ) as WorkerSuite<T>;

  if (options.cleanUpAfterEach) {
    afterEach(async () => {
      await killFixtures();
      await suite.pool.query(`DELETE FROM "${suite.schema}".workflow_queue WHERE status IN ('ENQUEUED', 'PENDING')`);
      await suite.pool.query(`DELETE FROM "${suite.schema}".executors`);
    });
  }

  suite.spawnWorker = (executorId, env = {}) =>
    spawnFixture(options.worker, executorId, { SCHEMA: suite.schema, EXECUTOR_ID: executorId, ...env });
  suite.startWorker = async (executorId, env = {}) => {
    const worker = suite.spawnWorker(executorId, env);
    await worker.message('ready');
    return worker;
  };
  suite.sigkill = async (worker) => {
    worker.child.kill('SIGKILL');
    expect(await worker.ended).toEqual({ code: null, signal: 'SIGKILL' });
  };
  suite.release = (key) => suite.pool.query(`INSERT INTO "${suite.schema}".release (key) VALUES ($1)`, [key]);
  return suite;
}
