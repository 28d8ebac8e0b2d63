/**
 * A hot queue over several shards on a Citus cluster (`queues: [{ name, shards }]` with `distribution: 'citus'`): its
 * rows are stored under one name per shard (`<name>\u001f<shard>`), which land on different worker nodes; a workflow's
 * shard follows from its deduplication key (so one key is decided by one unique index) or its ID; the workers of two
 * instances drain every shard, each workflow once; lists, counts, pause and cancel by the queue's own name, and every
 * value reported back (status, errors, events, counts) names the queue, never a shard. What is stored under the
 * queue's own name (by `enqueue_workflow` in SQL, or before it declared shards) is drained as one more shard.
 * A stored name a worker found empty (which its turns then pass by) is claimed again as soon as a wake-up names it.
 */
import { Injectable } from '@nestjs/common';
import { Test, TestingModule } from '@nestjs/testing';
import {
  DedupQueueConfigurationError,
  DedupQueueModule,
  DeduplicationEvent,
  QueueDeduplicatedError,
  QueueService,
  Workflow,
  runStep,
  setEvent,
  sleep,
  workflowContext,
} from 'nest-dedup-queue';
import { useCitusCluster } from './support/citus-suite';
import { uniqueSchema } from './support/database';
import { describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

const SHARDS = 8;
const KEYS = 60;
const shardName = (shard: number) => `hot\u001f${shard}`;

/** Counts each body run per workflow input, in the process that ran it. */
@Injectable()
class CountedTasks {
  readonly runs = new Map<string, number>();

  @Workflow()
  async work(key: string): Promise<string> {
    this.runs.set(key, (this.runs.get(key) ?? 0) + 1);
    return `done-${key}`;
  }

  /** What a running workflow of the queue sees and records: its context, a step, an event, a sleep, a child. */
  @Workflow()
  async composite(key: string): Promise<{ queueName: string; step: string; child: string }> {
    const step = await runStep('step', () => `step-${key}`);
    await setEvent('progress', { key });
    await sleep(50);
    const child = await QueueOwner.queues.enqueue('hot', this.work, [`child-${key}`]);
    return { queueName: workflowContext().queueName, step, child: await child.getResult() };
  }
}

/** The module's `QueueService`, for the workflow bodies above. */
const QueueOwner: { queues: QueueService } = { queues: undefined as unknown as QueueService };

describeWithTools(['postgres-15', 'citus'], 'Citus: a hot queue over several shards', () => {
  const schema = uniqueSchema('citus_shards');
  const citus = useCitusCluster();
  const modules: TestingModule[] = [];

  beforeAll(async () => {
    modules.push(citus.closeAfter(await boot('a')), citus.closeAfter(await boot('b')));
  }, 120_000);

  async function boot(executorId: string): Promise<TestingModule> {
    const module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: citus.cluster.url },
          distribution: 'citus',
          schema,
          executorId,
          queues: [{ name: 'hot', shards: SHARDS, workerConcurrency: 16 }, { name: 'plain' }],
          pollIntervalMs: 200,
          retryAttempts: 0,
        }),
      ],
      providers: [CountedTasks],
    }).compile();
    await module.init();
    return module;
  }

  const queuesOf = (index: number) => modules[index].get(QueueService);
  const tasksOf = (index: number) => modules[index].get(CountedTasks);

  it('spreads the shards of the queue over the worker nodes', async () => {
    const nodes = new Set<number>();
    for (let shard = 0; shard < SHARDS; shard++) {
      nodes.add(await citus.cluster.workerIndexFor(`"${schema}".workflow_queue`, shardName(shard)));
    }
    expect(nodes).toEqual(new Set([0, 1]));
  });

  it('deduplicates each key across instances, drains every workflow once, over several nodes', async () => {
    const events: DeduplicationEvent[] = [];
    const unlisten = queuesOf(0).onDeduplicated((event) => events.push(event));
    const held = { deduplicationWindowMs: 60_000 };
    const calls = Array.from({ length: KEYS }, (_, n) => `key-${n}`).flatMap((key) =>
      [0, 1].map((instance) =>
        queuesOf(instance)
          .enqueue('hot', tasksOf(instance).work, [key], { deduplicationId: key, ...held })
          .catch((error: unknown) => error),
      ),
    );
    const settled = await Promise.all(calls);
    unlisten();
    const refused = settled.filter((result) => result instanceof Error);
    const accepted = settled.filter((result) => !(result instanceof Error)) as Awaited<
      ReturnType<QueueService['enqueue']>
    >[];
    expect(accepted).toHaveLength(KEYS);
    expect(refused).toHaveLength(KEYS);
    for (const error of refused) {
      expect(error).toBeInstanceOf(QueueDeduplicatedError);
      expect((error as QueueDeduplicatedError).queueName).toBe('hot');
    }
    expect(events.every((event) => event.queueName === 'hot')).toBe(true);

    const results = await Promise.all(accepted.map((handle) => handle.getResult({ timeoutMs: 60_000 })));
    expect(results.sort()).toEqual(Array.from({ length: KEYS }, (_, n) => `done-key-${n}`).sort());
    const runs = new Map<string, number>();
    for (const tasks of [tasksOf(0), tasksOf(1)]) {
      for (const [key, count] of tasks.runs) runs.set(key, (runs.get(key) ?? 0) + count);
    }
    expect(runs.size).toBe(KEYS);
    expect([...runs.values()].every((count) => count === 1)).toBe(true);
    expect([...tasksOf(0).runs.keys()].length).toBeGreaterThan(0);
    expect([...tasksOf(1).runs.keys()].length).toBeGreaterThan(0);

    const { rows } = await citus.coordinator.query<{ queue_name: string; n: number; keys: number; once: boolean }>(
      `SELECT queue_name, count(*)::int AS n, count(DISTINCT deduplication_id)::int AS keys,
              bool_and(attempts = 1 AND status = 'SUCCESS') AS once
       FROM "${schema}".workflows WHERE queue_name LIKE 'hot%' GROUP BY queue_name ORDER BY queue_name`,
    );
    expect(rows.map((row) => row.queue_name).every((name) => /^hot\u001f[0-7]$/.test(name))).toBe(true);
    expect(rows.reduce((sum, row) => sum + row.n, 0)).toBe(KEYS);
    expect(rows.reduce((sum, row) => sum + row.keys, 0)).toBe(KEYS);
    expect(rows.every((row) => row.once)).toBe(true);
    const nodes = new Set<number>();
    for (const row of rows) nodes.add(await citus.cluster.workerIndexFor(`"${schema}".workflow_queue`, row.queue_name));
    expect(nodes.size).toBe(2);

    await expect(accepted[0].getStatus()).resolves.toMatchObject({ queueName: 'hot', status: 'SUCCESS' });
    const found = await queuesOf(1).findByDeduplicationId('hot', 'key-7');
    await expect(found?.getResult()).resolves.toBe('done-key-7');
    await expect(queuesOf(0).retrieve(accepted[1].workflowId)).resolves.toBeDefined();
  }, 120_000);

  it('lists and counts the queue by its own name', async () => {
    const queues = queuesOf(0);
    const listed = await queues.list({ queueName: 'hot', limit: 1000 });
    expect(listed).toHaveLength(KEYS);
    expect(listed.every((info) => info.queueName === 'hot' && info.status === 'SUCCESS')).toBe(true);
    const created = listed.map((info) => info.createdAt.getTime());
    expect(created).toEqual([...created].sort((a, b) => b - a));
    const page = await queues.list({ queueName: 'hot', limit: 10, offset: 5 });
    expect(page.map((info) => info.workflowId)).toEqual(listed.slice(5, 15).map((info) => info.workflowId));
    await expect(queues.countByStatus('hot')).resolves.toEqual({ hot: { SUCCESS: KEYS } });
    const all = await queues.countByStatus();
    expect(all.hot).toEqual({ SUCCESS: KEYS });
    expect(Object.keys(all).every((name) => !name.includes('\u001f'))).toBe(true);
  });

  it('pauses and resumes the queue by its own name, over every shard', async () => {
    const [queues, other] = [queuesOf(0), queuesOf(1)];
    await queues.pauseQueue('hot');
    await waitFor(async () => (await other.getQueueSettings('hot')).paused, { what: 'the pause read back' });
    const paused = await Promise.all(
      Array.from({ length: 16 }, (_, n) => queues.enqueue('hot', tasksOf(0).work, [`paused-${n}`])),
    );
    // A paused queue is not claimed: after several polls of both instances, all still wait.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await expect(queues.countByStatus('hot')).resolves.toEqual({ hot: { SUCCESS: KEYS, ENQUEUED: 16 } });
    await queues.resumeQueue('hot');
    await expect(Promise.all(paused.map((handle) => handle.getResult({ timeoutMs: 30_000 })))).resolves.toHaveLength(
      16,
    );
    await expect(queues.countByStatus('hot')).resolves.toEqual({ hot: { SUCCESS: KEYS + 16 } });
  }, 60_000);

  it('cancels by the queue’s own name across its shards', async () => {
    const queues = queuesOf(0);
    const delayed = await Promise.all(
      Array.from({ length: 12 }, (_, n) =>
        queues.enqueue('hot', tasksOf(0).work, [`later-${n}`], { delayMs: 600_000 }),
      ),
    );
    const { rows } = await citus.coordinator.query<{ n: number }>(
      `SELECT count(DISTINCT queue_name)::int AS n FROM "${schema}".workflows
       WHERE workflow_id = ANY($1::text[])`,
      [delayed.map((handle) => handle.workflowId)],
    );
    expect(rows[0].n).toBeGreaterThan(1);
    const cancelled = await queues.cancelMany({ queueName: 'hot', status: 'DELAYED' });
    expect(cancelled.map((result) => result.workflowId).sort()).toEqual(
      delayed.map((handle) => handle.workflowId).sort(),
    );
    expect(cancelled.every((result) => result.outcome === 'cancelled')).toBe(true);
    await expect(delayed[0].getStatus()).resolves.toMatchObject({ queueName: 'hot', status: 'CANCELLED' });
  });

  it('runs steps, events, sleeps and children of a workflow in a shard, its context naming the queue', async () => {
    QueueOwner.queues = queuesOf(0);
    const handles = await Promise.all(
      Array.from({ length: 6 }, (_, n) => queuesOf(0).enqueue('hot', tasksOf(0).composite, [`c${n}`])),
    );
    const results = await Promise.all(handles.map((handle) => handle.getResult({ timeoutMs: 60_000 })));
    expect(results).toEqual(
      Array.from({ length: 6 }, (_, n) => ({ queueName: 'hot', step: `step-c${n}`, child: `done-child-c${n}` })),
    );
    await expect(queuesOf(1).getEvent(handles[0].workflowId, 'progress')).resolves.toEqual({ key: 'c0' });
    const { rows } = await citus.coordinator.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${schema}".steps WHERE workflow_id = ANY($1::text[])`,
      [handles.map((handle) => handle.workflowId)],
    );
    expect(rows[0].n).toBeGreaterThanOrEqual(6);
  }, 120_000);

  it('drains what enqueue_workflow (SQL) stores under the queue’s own name, with the shards', async () => {
    const { rows } = await citus.coordinator.query<{ workflow_id: string }>(
      `SELECT * FROM "${schema}".enqueue_workflow(queue_name => 'hot', workflow_name => 'CountedTasks.work',
         args => '["from-sql"]'::json, deduplication_id => 'sql-key')`,
    );
    const handle = await queuesOf(0).retrieve(rows[0].workflow_id);
    await expect(handle.getResult({ timeoutMs: 30_000 })).resolves.toBe('done-from-sql');
    await expect(handle.getStatus()).resolves.toMatchObject({ queueName: 'hot', status: 'SUCCESS' });
    const listed = await queuesOf(0).list({ queueName: 'hot', deduplicationId: 'sql-key' });
    expect(listed.map((info) => info.workflowId)).toEqual([rows[0].workflow_id]);
  }, 60_000);

  it('claims a stored name found empty again once a wake-up names it, without a poll', async () => {
    const idleSchema = uniqueSchema('citus_shards_idle');
    const module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: citus.cluster.url },
          distribution: 'citus',
          schema: idleSchema,
          executorId: 'idle',
          queues: [{ name: 'hot', shards: SHARDS, workerConcurrency: 4 }],
          pollIntervalMs: 600_000,
          retryAttempts: 0,
        }),
      ],
      providers: [CountedTasks],
    }).compile();
    await module.init();
    try {
      const queues = module.get(QueueService);
      const tasks = module.get(CountedTasks);
      const first = await Promise.all(
        Array.from({ length: 24 }, (_, n) => queues.enqueue('hot', tasks.work, [`idle-${n}`])),
      );
      await expect(Promise.all(first.map((handle) => handle.getResult({ timeoutMs: 30_000 })))).resolves.toHaveLength(
        24,
      );
      const { rows } = await citus.coordinator.query<{ workflow_id: string }>(
        `SELECT * FROM "${idleSchema}".enqueue_workflow(queue_name => 'hot', workflow_name => 'CountedTasks.work',
           args => '["idle-sql"]'::json)`,
      );
      const fromSql = await queues.retrieve(rows[0].workflow_id);
      await expect(fromSql.getResult({ timeoutMs: 20_000 })).resolves.toBe('done-idle-sql');
      const later = await Promise.all(
        Array.from({ length: 8 }, (_, n) => queues.enqueue('hot', tasks.work, [`idle-later-${n}`])),
      );
      const results = await Promise.all(later.map((handle) => handle.getResult({ timeoutMs: 20_000 })));
      expect(results.sort()).toEqual(Array.from({ length: 8 }, (_, n) => `done-idle-later-${n}`).sort());
      expect([...tasks.runs.entries()].filter(([key]) => key.startsWith('idle')).every(([, n]) => n === 1)).toBe(true);
      expect(tasks.runs.get('idle-sql')).toBe(1);
    } finally {
      await module.close();
    }
  }, 120_000);

  it.each<[string, { name: string; shards?: number; concurrency?: number }, RegExp]>([
    ['a global concurrency', { name: 'q', shards: 4, concurrency: 10 }, /cannot hold across the 4 shards of queue "q"/],
    ['a name with U+001F', { name: 'q\u001f1' }, /contains U\+001F, which names a queue's shards/],
  ])('refuses %s at boot on Citus', async (_, queue, message) => {
    const error = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: citus.cluster.url },
          distribution: 'citus',
          schema,
          queues: [queue],
        }),
      ],
    })
      .compile()
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(DedupQueueConfigurationError);
    expect((error as Error).message).toMatch(message);
  });
});
