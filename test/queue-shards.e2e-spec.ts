/**
 * `queues: [{ name, shards }]` on one PostgreSQL server: the queue behaves as a plain queue (its rows under its own
 * name, deduplication exact, drained whole, its status and counts under its name), and whatever cannot hold across
 * shards is refused at boot (`DedupQueueConfigurationError`) and at run time (`setQueueLimits`). On Citus, see
 * citus-shards.e2e-spec.ts.
 */
import { Test } from '@nestjs/testing';
import {
  DedupQueueConfigurationError,
  DedupQueueModule,
  DedupQueueModuleOptions,
  InvalidArgumentError,
  QueueDeduplicatedError,
  QueueService,
} from 'nest-dedup-queue';
import { CapturingLogger } from './support/capturing-logger';
import { RecordingTasks } from './fixtures/recording-tasks';
import { startQueueApp, useQueueApp } from './support/queue-app';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';

describe('a queue with shards on one server', () => {
  const suite = useQueueApp<RecordingTasks>(
    'queue_shards',
    { queues: [{ name: 'hot', shards: 8, workerConcurrency: 4 }, { name: 'plain' }] },
    [RecordingTasks],
    { tasks: RecordingTasks },
  );

  it('stores, deduplicates and drains like a plain queue, under its own name', async () => {
    const { app, tasks, pool, schema } = suite;
    const handles = await Promise.all(
      Array.from({ length: 40 }, (_, index) =>
        app.queues.enqueue('hot', tasks.echo, [index], { deduplicationId: `key-${index % 20}` }).catch((e) => e),
      ),
    );
    const accepted = handles.filter((handle) => !(handle instanceof Error));
    const refused = handles.filter((handle) => handle instanceof Error);
    expect(accepted.length + refused.length).toBe(40);
    expect(refused.every((error) => error instanceof QueueDeduplicatedError && error.queueName === 'hot')).toBe(true);
    const results = await Promise.all(accepted.map((handle) => handle.getResult()));
    expect(results).toHaveLength(accepted.length);
    // A key's second call is accepted when its first workflow had already ended (its key freed), else refused.
    const { rows } = await pool.query<{ queue_name: string; workflows: string; keys: string }>(
      `SELECT queue_name, count(*)::text AS workflows, count(DISTINCT deduplication_id)::text AS keys
       FROM "${schema}".workflows WHERE queue_name LIKE 'hot%' GROUP BY queue_name`,
    );
    expect(rows).toEqual([{ queue_name: 'hot', workflows: String(accepted.length), keys: '20' }]);
    await expect(accepted[0].getStatus()).resolves.toMatchObject({ queueName: 'hot', status: 'SUCCESS' });
    await expect(app.queues.countByStatus('hot')).resolves.toEqual({ hot: { SUCCESS: accepted.length } });
  });

  it('refuses a run-time limit that would hold across its shards, and takes workerConcurrency', async () => {
    const { app } = suite;
    for (const limits of [
      { concurrency: 2 },
      { partitionConcurrency: 1 },
      { rateLimit: { limit: 5, periodMs: 1000 } },
    ]) {
      const error = await app.queues.setQueueLimits('hot', limits).catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as Error).message).toMatch(/cannot hold across the 8 shards of queue "hot"/);
    }
    await app.queues.setQueueLimits('hot', { workerConcurrency: 2 });
    await expect(app.queues.getQueueSettings('hot')).resolves.toEqual({ workerConcurrency: 2, paused: false });
    await app.queues.setQueueLimits('plain', { concurrency: 2 });
    await expect(app.queues.getQueueSettings('plain')).resolves.toMatchObject({ concurrency: 2 });
  });
});

describe('the refusals of `shards` at boot', () => {
  const schema = uniqueSchema('queue_shards_refused');

  afterAll(async () => {
    const pool = testPool();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it.each<[string, Partial<DedupQueueModuleOptions>, RegExp]>([
    [
      'a global concurrency',
      { queues: [{ name: 'q', shards: 4, concurrency: 10 }] },
      /`queues\["q"\]\.concurrency` cannot hold across the 4 shards of queue "q"/,
    ],
    [
      'partitions',
      { queues: [{ name: 'q', shards: 4, partitionConcurrency: 1 }] },
      /`queues\["q"\]\.partitionConcurrency` cannot hold across the 4 shards/,
    ],
    [
      'a rate limit',
      { queues: [{ name: 'q', shards: 2, rateLimit: { limit: 5, periodMs: 1000 } }] },
      /`queues\["q"\]\.rateLimit` cannot hold across the 2 shards/,
    ],
    ['zero shards', { queues: [{ name: 'q', shards: 0 }] }, /`queues\["q"\]\.shards` must be an integer from 1 to 64/],
    ['65 shards', { queues: [{ name: 'q', shards: 65 }] }, /shards` must be an integer from 1 to 64, got 65/],
    ['a fractional count', { queues: [{ name: 'q', shards: 1.5 }] }, /shards` must be an integer from 1 to 64/],
    [
      'a queue name with U+001F, which names the shards of a queue on Citus',
      { queues: [{ name: 'q\u001f0' }] },
      /queue name "q\\u001f0" \(in DedupQueueModule\.forRoot\(\{ queues \}\)\) contains U\+001F/,
    ],
  ])('refuses %s with a message naming the option', async (_, options, message) => {
    const error = await startQueueApp({ schema, ...options }).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(DedupQueueConfigurationError);
    expect((error as Error).message).toMatch(message);
  });

  it('takes one shard with a limit (one shard is a plain queue)', async () => {
    const app = await startQueueApp({ schema, worker: false, queues: [{ name: 'q', shards: 1, concurrency: 2 }] });
    try {
      await expect(app.queues.getQueueSettings('q')).resolves.toMatchObject({ concurrency: 2 });
    } finally {
      await app.close();
    }
  });

  it('ignores a queue-wide override stored before the queue declared shards, saying so once at boot', async () => {
    const before = await startQueueApp({ schema, worker: false, queues: [{ name: 'was-plain' }] });
    try {
      await before.queues.setQueueLimits('was-plain', { concurrency: 3 });
    } finally {
      await before.close();
    }
    const logger = new CapturingLogger();
    const module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: databaseUrl() },
          schema,
          worker: false,
          queues: [{ name: 'was-plain', shards: 4 }],
        }),
      ],
    })
      .setLogger(logger)
      .compile();
    await module.init();
    try {
      expect(logger.matching(/was-plain/).map((line) => [line.level, line.message])).toEqual([
        [
          'warn',
          'Queue "was-plain" declares 4 shards and ignores its run-time `concurrency` override; clear it with ' +
            "setQueueLimits('was-plain', { concurrency: null })",
        ],
      ]);
      const queues = module.get(QueueService);
      await expect(queues.getQueueSettings('was-plain')).resolves.toEqual({ workerConcurrency: 10, paused: false });
      await queues.setQueueLimits('was-plain', { concurrency: null });
      await expect(queues.getQueueSettings('was-plain')).resolves.toEqual({ workerConcurrency: 10, paused: false });
    } finally {
      await module.close();
    }
  });
});
