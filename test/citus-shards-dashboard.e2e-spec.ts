/**
 * The dashboard's HTTP API over a queue with shards on a Citus cluster (`queues: [{ name, shards }]`): the queue page
 * counts every shard, the workflow list and its filters (queue, status, name, deduplication ID, search) read every
 * shard and name the queue, never a shard; the queue's pause and the cancel of a filter cover every shard; a workflow
 * in a shard gets its message and shows its stream.
 */
import { INestApplication, Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  DedupQueueDashboardModule,
  DedupQueueModule,
  QueueService,
  Workflow,
  closeStream,
  recv,
  writeStream,
} from 'nest-dedup-queue';
import { Registry } from 'prom-client';
import request from 'supertest';
import { useCitusCluster } from './support/citus-suite';
import { uniqueSchema } from './support/database';
import { describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

const SHARDS = 4;
const FINISHED = 24;
const DELAYED = 8;
const json = { 'content-type': 'application/json' };

@Injectable()
class ShardedTasks {
  @Workflow()
  async work(key: string): Promise<string> {
    return `done-${key}`;
  }

  /** Writes a stream, then waits for a message and returns it. */
  @Workflow()
  async conversation(key: string): Promise<string> {
    await writeStream('progress', { key, step: 1 });
    await writeStream('progress', { key, step: 2 });
    await closeStream('progress');
    const message = await recv<string>('reply', { timeoutMs: 60_000 });
    return `got ${message}`;
  }
}

describeWithTools(['postgres-15', 'citus'], "Citus: the dashboard's API over a queue with shards", () => {
  const schema = uniqueSchema('citus_shards_dashboard');
  const citus = useCitusCluster();
  let app: INestApplication;
  let queues: QueueService;
  let tasks: ShardedTasks;
  const finished: string[] = [];
  const delayed: string[] = [];
  const registry = new Registry();

  beforeAll(async () => {
    const module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: citus.cluster.url },
          distribution: 'citus',
          schema,
          queues: [{ name: 'hot', shards: SHARDS, workerConcurrency: 8 }, { name: 'plain' }],
          pollIntervalMs: 200,
          retryAttempts: 0,
          metrics: { registry },
        }),
        DedupQueueDashboardModule.forRoot({ path: '/queues' }),
      ],
      providers: [ShardedTasks],
    }).compile();
    app = citus.closeAfter(module.createNestApplication({ logger: ['error'] }));
    await app.init();
    queues = app.get(QueueService);
    tasks = app.get(ShardedTasks);

    const done = await Promise.all(
      Array.from({ length: FINISHED }, (_, n) =>
        queues.enqueue('hot', tasks.work, [`k-${n}`], { deduplicationId: `k-${n}` }),
      ),
    );
    await Promise.all(done.map((handle) => handle.getResult({ timeoutMs: 60_000 })));
    finished.push(...done.map((handle) => handle.workflowId));
    const later = await Promise.all(
      Array.from({ length: DELAYED }, (_, n) =>
        queues.enqueue('hot', tasks.work, [`later-${n}`], { delayMs: 600_000 }),
      ),
    );
    delayed.push(...later.map((handle) => handle.workflowId));
    await queues.enqueue('plain', tasks.work, ['plain-1'], { delayMs: 600_000 });
  }, 180_000);

  const server = () => app.getHttpServer();
  const list = async (query: Record<string, string | number>) =>
    (await request(server()).get('/queues/api/workflows').query(query).expect(200)).body as {
      workflows: Array<{ workflowId: string; queueName: string; status: string; deduplicationId: string | null }>;
      total: { value: number; exact: boolean };
      nextCursor: string | null;
    };
  const hotCounts = async () => {
    const page = await request(server()).get('/queues/api/queues').expect(200);
    const hot = (page.body.queues as Array<{ name: string; paused: boolean; counts: Record<string, unknown> }>).find(
      (queue) => queue.name === 'hot',
    );
    return hot!;
  };

  it('stores the workflows under several shards (the premise of the tests below)', async () => {
    const { rows } = await citus.coordinator.query<{ n: number }>(
      `SELECT count(DISTINCT queue_name)::int AS n FROM "${schema}".workflows WHERE workflow_id = ANY($1::text[])`,
      [[...finished, ...delayed]],
    );
    expect(rows[0].n).toBeGreaterThan(1);
  });

  it('counts every shard on the queue page, and lists no shard as a queue', async () => {
    const page = await request(server()).get('/queues/api/queues').expect(200);
    const names = (page.body.queues as Array<{ name: string }>).map((queue) => queue.name);
    expect(names.sort()).toEqual(['hot', 'plain']);
    const hot = await hotCounts();
    expect(hot.counts).toMatchObject({
      SUCCESS: { value: FINISHED, exact: true },
      DELAYED: { value: DELAYED, exact: true },
      ENQUEUED: { value: 0, exact: true },
    });
    expect((hot as unknown as { finished: { last5Minutes: number } }).finished.last5Minutes).toBe(FINISHED);
  });

  it('lists the queue over every shard, by its own name, newest first, page by page', async () => {
    const all = await list({ queue: 'hot', limit: 500 });
    expect(all.total).toEqual({ value: FINISHED + DELAYED, exact: true });
    expect(all.workflows.map((workflow) => workflow.workflowId).sort()).toEqual([...finished, ...delayed].sort());
    expect(all.workflows.every((workflow) => workflow.queueName === 'hot')).toBe(true);

    const paged: string[] = [];
    let cursor: string | null = null;
    do {
      const page = await list({ queue: 'hot', limit: 7, ...(cursor ? { cursor } : {}) });
      paged.push(...page.workflows.map((workflow) => workflow.workflowId));
      cursor = page.nextCursor;
    } while (cursor);
    expect(paged).toEqual(all.workflows.map((workflow) => workflow.workflowId));
  });

  it('filters by status with and without the queue, by name, by deduplication ID and by search', async () => {
    const delayedHot = await list({ queue: 'hot', status: 'DELAYED', limit: 500 });
    expect(delayedHot.workflows.map((workflow) => workflow.workflowId).sort()).toEqual([...delayed].sort());
    expect(delayedHot.total).toEqual({ value: DELAYED, exact: true });

    const delayedAll = await list({ status: 'DELAYED', limit: 500 });
    expect(delayedAll.total).toEqual({ value: DELAYED + 1, exact: true });
    expect(delayedAll.workflows.filter((workflow) => workflow.queueName === 'hot')).toHaveLength(DELAYED);
    expect(delayedAll.workflows.every((workflow) => ['hot', 'plain'].includes(workflow.queueName))).toBe(true);

    const succeeded = await list({ queue: 'hot', status: 'SUCCESS,DELAYED', limit: 500 });
    expect(succeeded.total).toEqual({ value: FINISHED + DELAYED, exact: true });

    const byName = await list({ workflowName: 'ShardedTasks.work', status: 'SUCCESS', limit: 500 });
    expect(byName.workflows.map((workflow) => workflow.workflowId).sort()).toEqual([...finished].sort());
    expect(byName.workflows.every((workflow) => workflow.queueName === 'hot')).toBe(true);

    for (const query of <Array<Record<string, string>>>[
      { deduplicationId: 'k-5' },
      { queue: 'hot', deduplicationId: 'k-5' },
      { search: 'k-5' },
      { queue: 'hot', search: 'k-5', status: 'SUCCESS' },
    ]) {
      const found = await list(query);
      expect(found.workflows).toEqual([
        expect.objectContaining({ queueName: 'hot', deduplicationId: 'k-5', status: 'SUCCESS' }),
      ]);
      expect(found.total).toEqual({ value: 1, exact: true });
    }

    const one = await request(server()).get(`/queues/api/workflows/${finished[0]}`).expect(200);
    expect(one.body).toMatchObject({ workflowId: finished[0], queueName: 'hot', status: 'SUCCESS' });
  });

  it('reruns a workflow of a shard into its queue', async () => {
    const rerun = await request(server()).post(`/queues/api/workflows/${delayed[0]}/rerun`).set(json).send({});
    expect(rerun.status).toBe(201);
    const handle = await queues.retrieve(rerun.body.workflowId as string);
    await expect(handle.getResult({ timeoutMs: 30_000 })).resolves.toBe('done-later-0');
    await expect(handle.getStatus()).resolves.toMatchObject({ queueName: 'hot', status: 'SUCCESS' });
    expect((await hotCounts()).counts).toMatchObject({ SUCCESS: { value: FINISHED + 1, exact: true } });
  }, 60_000);

  it('pauses and resumes the queue over every shard, and cancels a filter across them', async () => {
    const paused = await request(server()).post('/queues/api/queues/hot/pause').set(json).send({}).expect(200);
    expect(paused.body).toMatchObject({ name: 'hot', paused: true });
    const held = await Promise.all(
      Array.from({ length: 8 }, (_, n) => queues.enqueue('hot', tasks.work, [`held-${n}`])),
    );
    // Several polls of the worker: a paused queue is claimed in none of its shards.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect((await hotCounts()).counts).toMatchObject({ ENQUEUED: { value: 8, exact: true } });
    const resumed = await request(server()).post('/queues/api/queues/hot/resume').set(json).send({}).expect(200);
    expect(resumed.body).toMatchObject({ name: 'hot', paused: false });
    await Promise.all(held.map((handle) => handle.getResult({ timeoutMs: 30_000 })));

    const cancelled = await request(server())
      .post('/queues/api/workflows/cancel-matching')
      .set(json)
      .send({ queueName: 'hot', status: 'DELAYED' })
      .expect(200);
    const results = cancelled.body.results as Array<{ workflowId: string; outcome: string }>;
    expect(results.map((result) => result.workflowId).sort()).toEqual([...delayed].sort());
    expect(results.every((result) => result.outcome === 'cancelled')).toBe(true);
    await waitFor(async () => (await list({ queue: 'hot', status: 'CANCELLED' })).total.value === DELAYED, {
      what: 'the cancelled workflows listed',
    });
    expect((await hotCounts()).counts).toMatchObject({
      DELAYED: { value: 0, exact: true },
      CANCELLED: { value: DELAYED, exact: true },
      SUCCESS: { value: FINISHED + 1 + 8, exact: true },
    });
  }, 90_000);

  it('shows the stream of a workflow in a shard, which gets its message', async () => {
    const handle = await queues.enqueue('hot', tasks.conversation, ['talk'], { deduplicationId: 'talk' });
    await waitFor(
      async () =>
        ((await request(server()).get(`/queues/api/workflows/${handle.workflowId}`)).body.streams ?? []).length > 0,
      { what: 'the stream shown' },
    );
    const detail = await request(server()).get(`/queues/api/workflows/${handle.workflowId}`).expect(200);
    expect(detail.body.queueName).toBe('hot');
    expect(detail.body.streams).toEqual([
      expect.objectContaining({
        key: 'progress',
        values: 2,
        closed: true,
        recent: [
          { offset: 0, value: { key: 'talk', step: 1 } },
          { offset: 1, value: { key: 'talk', step: 2 } },
        ],
      }),
    ]);
    const stream = await request(server())
      .get(`/queues/api/workflows/${handle.workflowId}/streams/progress`)
      .expect(200);
    expect(stream.body).toMatchObject({ key: 'progress', ended: true, nextOffset: 2 });
    await queues.send(handle.workflowId, 'hello', { topic: 'reply' });
    await expect(handle.getResult({ timeoutMs: 30_000 })).resolves.toBe('got hello');
  }, 60_000);

  it('forks a workflow of a shard, and the workflows a filter matches across the shards, into the queue', async () => {
    const fork = await request(server()).post(`/queues/api/workflows/${finished[1]}/fork`).set(json).send({});
    expect(fork.status).toBe(201);
    expect(fork.body).toMatchObject({ forkedFrom: finished[1], created: true });
    const forked = await queues.retrieve(fork.body.workflowId as string);
    await expect(forked.getResult({ timeoutMs: 30_000 })).resolves.toBe('done-k-1');
    await expect(forked.getStatus()).resolves.toMatchObject({ queueName: 'hot', status: 'SUCCESS' });

    const many = await request(server())
      .post('/queues/api/workflows/fork-matching')
      .set(json)
      .send({ queueName: 'hot', status: 'CANCELLED' })
      .expect(200);
    const results = many.body.results as Array<{ workflowId: string; outcome: string; forkWorkflowId?: string }>;
    expect(results.map((result) => result.workflowId).sort()).toEqual([...delayed].sort());
    expect(results.every((result) => result.outcome === 'forked' && result.forkWorkflowId)).toBe(true);
    const forks = await Promise.all(results.map((result) => queues.retrieve(result.forkWorkflowId!)));
    await expect(Promise.all(forks.map((handle) => handle.getResult({ timeoutMs: 30_000 })))).resolves.toEqual(
      results.map((result) => `done-later-${delayed.indexOf(result.workflowId)}`),
    );
  }, 60_000);

  it('reports the stranded runs of a version no executor registers once for the queue, its shards added up', async () => {
    const stranded = await Promise.all(
      Array.from({ length: 6 }, (_, n) =>
        queues.enqueue('hot', 'ShardedTasks.work', [`v2-${n}`], { version: 2, deduplicationId: `v2-${n}` }),
      ),
    );
    const { rows } = await citus.coordinator.query<{ n: number }>(
      `SELECT count(DISTINCT queue_name)::int AS n FROM "${schema}".workflows WHERE workflow_id = ANY($1::text[])`,
      [stranded.map((handle) => handle.workflowId)],
    );
    expect(rows[0].n).toBeGreaterThan(1);
    const expected = [{ queueName: 'hot', workflowName: 'ShardedTasks.work', version: 2, count: 6 }];
    await waitFor(
      async () =>
        JSON.stringify((await request(server()).get('/queues/api/versions').expect(200)).body.stranded) ===
        JSON.stringify(expected),
      { what: 'the stranded runs reported once, by the queue', timeoutMs: 30_000 },
    );

    const metrics = await registry.metrics();
    expect(metrics).not.toContain('\u001f');
    expect(metrics).toMatch(
      /^dedup_queue_stranded_workflows\{queue="hot",workflow="ShardedTasks.work",version="2"\} 6$/m,
    );
    const succeeded = (await hotCounts()).counts.SUCCESS as { value: number };
    expect(metrics).toMatch(
      new RegExp(`^dedup_queue_workflows\\{queue="hot",status="SUCCESS"\\} ${succeeded.value}$`, 'm'),
    );
    expect(metrics).toMatch(/^dedup_queue_workflows\{queue="hot",status="ENQUEUED"\} 6$/m);
  }, 60_000);
});
