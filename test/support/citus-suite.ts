import type { Provider } from '@nestjs/common';
import { Test, TestingModule } from '@nestjs/testing';
import { DedupQueueModule, type DedupQueueModuleOptions } from 'nest-dedup-queue';
import { Pool } from 'pg';
import { CitusCluster, CitusClusterOptions, startCitusCluster } from './citus-cluster';
import { testPool } from './database';

/** What a test file boots on the cluster and closes after its tests: a testing module, an application. */
export interface Closable {
  close(): Promise<unknown>;
}

/**
 * One test file's Citus cluster, started before its tests and stopped after them, with pools on its nodes and what
 * the file booted on it: after the tests, everything booted is closed (in the order booted, a failure to close
 * ignored), then the pools end and the cluster stops.
 */
export interface CitusSuite {
  readonly cluster: CitusCluster;
  /** A pool on the coordinator. */
  readonly coordinator: Pool;
  /** A pool on worker node `index`, opened at first use. */
  worker(index: number): Pool;
  /** Closes `closable` after the file's tests, before the pools end; returns it. */
  closeAfter<T extends Closable>(closable: T): T;
  /**
   * A testing module of `DedupQueueModule.forRoot(options)` on the cluster's coordinator (`distribution: 'citus'`)
   * with `providers`, initialised, and closed after the file's tests.
   */
  boot(
    options: Omit<DedupQueueModuleOptions, 'connection' | 'distribution'>,
    providers?: Provider[],
  ): Promise<TestingModule>;
}

export interface CitusSuiteOptions extends CitusClusterOptions {
  /** Runs first after the tests, before anything is closed (e.g. killing the file's child processes). */
  beforeClose?: () => Promise<unknown>;
}

/**
 * Registers, in the calling `describe`, the `beforeAll` that starts the file's cluster and the `afterAll` that
 * closes all of it. Hooks the file declares after this call run after the cluster started; the file closes what it
 * boots with {@link CitusSuite.closeAfter} rather than an `afterAll` of its own (that would run after the cluster
 * stopped).
 */
export function useCitusCluster(options: CitusSuiteOptions = {}): CitusSuite {
  let cluster: CitusCluster | undefined;
  let coordinator: Pool | undefined;
  const workers = new Map<number, Pool>();
  const closables: Closable[] = [];

  beforeAll(async () => {
    cluster = await startCitusCluster(options);
    coordinator = testPool(cluster.url);
  }, 120_000);

  afterAll(async () => {
    await options.beforeClose?.();
    for (const closable of closables) await closable.close().catch(() => undefined);
    await coordinator?.end();
    for (const pool of workers.values()) await pool.end();
    await cluster?.stop();
  });

  const started = (): CitusCluster => {
    if (!cluster) throw new Error("the file's Citus cluster is started in beforeAll: use it from a hook or a test");
    return cluster;
  };

  const closeAfter = <T extends Closable>(closable: T): T => {
    closables.push(closable);
    return closable;
  };

  return {
    get cluster() {
      return started();
    },
    get coordinator() {
      started();
      return coordinator!;
    },
    worker(index) {
      let pool = workers.get(index);
      if (!pool) {
        pool = testPool(started().workerUrls[index]);
        workers.set(index, pool);
      }
      return pool;
    },
    closeAfter,
    async boot(moduleOptions, providers = []) {
      const module = await Test.createTestingModule({
        imports: [
          DedupQueueModule.forRoot({ connection: { url: started().url }, distribution: 'citus', ...moduleOptions }),
        ],
        providers,
      }).compile();
      closeAfter(module);
      await module.init();
      return module;
    },
  };
}
