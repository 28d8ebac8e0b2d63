import { Test } from '@nestjs/testing';
import { Injectable, Logger } from '@nestjs/common';
import {
  DedupQueueConfigurationError,
  DedupQueueModule,
  DedupQueueModuleOptions,
  QueueService,
  Workflow,
  workflowContext,
} from 'nest-dedup-queue';
import { DoublingTasks } from './fixtures/doubling-tasks';
import { useCitusCluster } from './support/citus-suite';
import { uniqueSchema } from './support/database';
import { describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

/** Runs until its signal aborts; records when it saw the abort. */
@Injectable()
class WaitingTasks {
  static started = new Set<string>();
  static abortedAt = new Map<string, number>();

  @Workflow()
  async waitForAbort(key: string): Promise<string> {
    const { signal } = workflowContext();
    WaitingTasks.started.add(key);
    await new Promise<void>((resolve) => {
      if (signal.aborted) return resolve();
      signal.addEventListener('abort', () => resolve(), { once: true });
    });
    WaitingTasks.abortedAt.set(key, Date.now());
    throw signal.reason;
  }
}

/** Every instance polls this seldom, so only a NOTIFY can wake it or interrupt its runs within a test. */
const POLL_MS = 60_000;
/** Well under a poll: what a NOTIFY must do within. */
const HEARD_WITHIN_MS = 15_000;

/**
 * Wake-ups on a Citus cluster whose instances connect to any node (issue 36, item 2; docs/citus.md, "Worker nodes"):
 * with `distribution: 'citus'` an instance LISTENs on every node of `pg_dist_node`, so a wake-up or a cancel hint
 * sent through any node reaches it at once. Every instance polls at 60 s.
 */
describeWithTools(['postgres-15', 'citus'], 'Citus: wake-ups from every node', () => {
  const citus = useCitusCluster();

  async function boot(url: string, options: Partial<DedupQueueModuleOptions> & { schema: string }) {
    const module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url },
          queues: [{ name: 'tasks' }],
          distribution: 'citus',
          retryAttempts: 0,
          pollIntervalMs: POLL_MS,
          ...options,
        }),
      ],
      providers: [DoublingTasks, WaitingTasks],
    }).compile();
    citus.closeAfter(module);
    await module.init();
    return module;
  }

  it('wakes an instance on the coordinator by an enqueue sent through a worker node', async () => {
    const schema = uniqueSchema('citwake');
    const consumer = await boot(citus.cluster.url, { schema });
    const producer = await boot(citus.cluster.workerUrls[0], { schema, worker: false });
    const started = Date.now();
    const handle = await producer.get(QueueService).enqueue('tasks', 'DoublingTasks.double', [21]);
    const ran = await consumer.get(QueueService).retrieve(handle.workflowId);
    await expect(ran.getResult({ timeoutMs: HEARD_WITHIN_MS })).resolves.toBe(42);
    expect(Date.now() - started).toBeLessThan(HEARD_WITHIN_MS);
  });

  it('wakes an instance on a worker node by an enqueue sent through the other worker node', async () => {
    const schema = uniqueSchema('citwake');
    await boot(citus.cluster.url, { schema, worker: false });
    const consumer = await boot(citus.cluster.workerUrls[1], { schema });
    const producer = await boot(citus.cluster.workerUrls[0], { schema, worker: false });
    const started = Date.now();
    const handles = await Promise.all(
      [1, 2, 3].map((n) => producer.get(QueueService).enqueue('tasks', 'DoublingTasks.double', [n])),
    );
    const results = await Promise.all(
      handles.map(async (handle) =>
        (await consumer.get(QueueService).retrieve(handle.workflowId)).getResult({ timeoutMs: HEARD_WITHIN_MS }),
      ),
    );
    expect(results).toEqual([2, 4, 6]);
    expect(Date.now() - started).toBeLessThan(HEARD_WITHIN_MS);
  });

  it('interrupts a run on the coordinator at once when it is cancelled through a worker node', async () => {
    const schema = uniqueSchema('citwake');
    const consumer = await boot(citus.cluster.url, { schema });
    const producer = await boot(citus.cluster.workerUrls[0], { schema, worker: false });
    const key = `${schema}-cancel`;
    const handle = await consumer.get(QueueService).enqueue('tasks', 'WaitingTasks.waitForAbort', [key]);
    await waitFor(() => WaitingTasks.started.has(key), { timeoutMs: HEARD_WITHIN_MS });
    const cancelledAt = Date.now();
    await expect(producer.get(QueueService).cancel(handle.workflowId)).resolves.toBe('CANCELLED');
    await waitFor(() => WaitingTasks.abortedAt.has(key), { timeoutMs: HEARD_WITHIN_MS });
    expect(WaitingTasks.abortedAt.get(key)! - cancelledAt).toBeLessThan(HEARD_WITHIN_MS);
    expect((await handle.getStatus()).status).toBe('CANCELLED');
  });

  it('refuses a bad node mapping with a typed error before anything is written', async () => {
    const schema = uniqueSchema('citwake');
    for (const mapping of [
      { nodeAddresses: { 'worker-1': '127.0.0.1:5432' } },
      { nodeAddresses: { 'worker-1:5432': '127.0.0.1:99999' } },
      { nodeAddresses: { 'worker-1:5432': 5432 } },
      { nodeAdresses: {} },
    ]) {
      const refused = boot(citus.cluster.url, { schema, citus: mapping as never });
      await expect(refused).rejects.toThrow(DedupQueueConfigurationError);
      await expect(refused).rejects.toThrow(/`citus/);
    }
    const single = boot(citus.cluster.url, { schema, distribution: 'single', citus: { nodeAddresses: {} } });
    await expect(single).rejects.toThrow("`citus` needs `distribution: 'citus'`");
    const { rows } = await citus.coordinator.query(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [schema]);
    expect(rows).toEqual([]);
  });

  it('reaches a node at its mapped address, and logs once that it cannot', async () => {
    const schema = uniqueSchema('citwake');
    const warnings: string[] = [];
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation((message: unknown) => {
      warnings.push(String(message));
    });
    try {
      const nodeName = `127.0.0.1:${citus.cluster.workers[1].port}`;
      await boot(citus.cluster.url, { schema, citus: { nodeAddresses: { [nodeName]: '127.0.0.1:1' } } });
      await waitFor(() => warnings.some((line) => line.includes(`Citus node ${nodeName} (reached at 127.0.0.1:1)`)), {
        timeoutMs: HEARD_WITHIN_MS,
      });
      expect(warnings.filter((line) => line.includes(`Citus node ${nodeName}`))).toHaveLength(1);
    } finally {
      warn.mockRestore();
    }
  });
});
