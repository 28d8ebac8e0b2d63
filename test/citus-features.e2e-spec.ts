/**
 * The module's features on a Citus cluster (`distribution: 'citus'`), beyond the hot statements
 * (citus-statements.e2e-spec.ts) and the deduplication race and node failure (citus-guarantees.e2e-spec.ts): wake-ups
 * by NOTIFY from the coordinator (polling is set to a minute, so only a delivered notification can start a workflow
 * in time: an enqueue, a message to a workflow waiting in `recv`, a reschedule), a global concurrency limit held
 * exactly, a rate limit, one at a time per partition key, a runtime schedule that fires and is triggered, the dashboard's
 * API over HTTP, and crash recovery: a worker process SIGKILLed mid-run, its workflow recovered by another process.
 */
import { INestApplication, Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  DedupQueueDashboardModule,
  DedupQueueModule,
  QueueService,
  ScheduleService,
  Workflow,
  recv,
} from 'nest-dedup-queue';
import request from 'supertest';
import { FixtureProcess, killFixtures, spawnFixture } from './fixtures/child-harness';
import { useCitusCluster } from './support/citus-suite';
import { uniqueSchema } from './support/database';
import { describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

/** Workflows that record how many of them run at once. */
@Injectable()
class CountingTasks {
  running = 0;
  mostAtOnce = 0;
  readonly ran: string[] = [];

  @Workflow()
  async overlap(label: string): Promise<string> {
    this.running += 1;
    this.mostAtOnce = Math.max(this.mostAtOnce, this.running);
    await new Promise((resolve) => setTimeout(resolve, 40));
    this.running -= 1;
    this.ran.push(label);
    return label;
  }

  readonly runningByKey = new Map<string, number>();
  mostAtOnceByKey = 0;

  /** Like `overlap`, counting per partition key. */
  @Workflow()
  async overlapByKey(key: string, label: string): Promise<string> {
    this.runningByKey.set(key, (this.runningByKey.get(key) ?? 0) + 1);
    this.mostAtOnceByKey = Math.max(this.mostAtOnceByKey, ...this.runningByKey.values());
    await new Promise((resolve) => setTimeout(resolve, 40));
    this.runningByKey.set(key, this.runningByKey.get(key)! - 1);
    return label;
  }

  /** Waits in `recv` (WAITING, holding no slot) for one message of `topic` and returns it. */
  @Workflow()
  async receive(topic: string): Promise<unknown> {
    return recv(topic);
  }
}

/** The crash fixture's workflow (test/fixtures/child-worker.ts), as this process runs it once recovered. */
@Injectable()
class HoldingTasks {
  @Workflow()
  async hold(key: string): Promise<string> {
    return `recovered ${key}`;
  }
}

describeWithTools(['postgres-15', 'citus'], 'Citus: the features on the cluster', () => {
  const schema = uniqueSchema('citus_features');
  const citus = useCitusCluster({ beforeClose: killFixtures });
  let app: INestApplication;
  let queues: QueueService;
  let tasks: CountingTasks;

  beforeAll(async () => {
    const module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: citus.cluster.url },
          distribution: 'citus',
          schema,
          queues: [
            { name: 'tasks', workerConcurrency: 8 },
            { name: 'one-at-a-time', concurrency: 1, workerConcurrency: 4 },
            { name: 'sigterm' },
            { name: 'rated', rateLimit: { limit: 3, periodMs: 1000 }, workerConcurrency: 4 },
            { name: 'by-key', partitionConcurrency: 1, workerConcurrency: 4 },
          ],
          worker: { queues: ['tasks', 'one-at-a-time', 'rated', 'by-key'] },
          pollIntervalMs: 60_000,
        }),
        DedupQueueDashboardModule.forRoot({ path: '/queues' }),
      ],
      providers: [CountingTasks, HoldingTasks],
    }).compile();
    app = citus.closeAfter(module.createNestApplication({ logger: ['error'] }));
    await app.init();
    queues = app.get(QueueService);
    tasks = app.get(CountingTasks);
  });

  it('starts an enqueued workflow by NOTIFY from the coordinator, well before the minute-long poll', async () => {
    // The first claims after boot are behind us: from now on only a wake-up can start a workflow in time.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const startedAt = Date.now();
    const handle = await queues.enqueue('tasks', tasks.overlap, ['woken']);
    await expect(handle.getResult({ timeoutMs: 30_000 })).resolves.toBe('woken');
    expect(Date.now() - startedAt).toBeLessThan(10_000);
  });

  it('wakes a workflow waiting in recv by NOTIFY from the coordinator when a message arrives', async () => {
    const handle = await queues.enqueue('tasks', tasks.receive, ['ping']);
    await waitFor(async () => (await handle.getStatus())?.status === 'WAITING', {
      what: 'the receiver to wait in recv',
      timeoutMs: 20_000,
    });
    const sentAt = Date.now();
    await queues.send(handle.workflowId, { n: 1 }, { topic: 'ping' });
    await expect(handle.getResult({ timeoutMs: 30_000 })).resolves.toEqual({ n: 1 });
    expect(Date.now() - sentAt).toBeLessThan(10_000);
  });

  it('starts a delayed workflow rescheduled to now by NOTIFY from the coordinator', async () => {
    const handle = await queues.enqueue('tasks', tasks.overlap, ['rescheduled'], { delayMs: 3_600_000 });
    const rescheduledAt = Date.now();
    await queues.reschedule(handle.workflowId, { delayMs: 0 });
    await expect(handle.getResult({ timeoutMs: 30_000 })).resolves.toBe('rescheduled');
    expect(Date.now() - rescheduledAt).toBeLessThan(10_000);
  });

  it('starts at most 3 per second of a rate-limited queue, by started_at', async () => {
    const handles = await Promise.all(
      Array.from({ length: 9 }, (_, n) => queues.enqueue('rated', tasks.overlap, [`rated-${n}`])),
    );
    await Promise.all(handles.map((handle) => handle.getResult({ timeoutMs: 30_000 })));
    const { rows } = await citus.coordinator.query<{ started: number }>(
      `SELECT extract(epoch FROM started_at) * 1000 AS started FROM "${schema}".workflows
       WHERE queue_name = 'rated' ORDER BY started_at`,
    );
    const starts = rows.map((row) => Number(row.started));
    expect(starts).toHaveLength(9);
    const mostInAWindow = Math.max(...starts.map((at) => starts.filter((s) => s >= at && s < at + 1000).length));
    expect(mostInAWindow).toBe(3);
  });

  it('runs one workflow at a time per partition key of a partitioned queue', async () => {
    const handles = await Promise.all(
      Array.from({ length: 12 }, (_, n) =>
        queues.enqueue('by-key', tasks.overlapByKey, [`key-${n % 3}`, `part-${n}`], { partitionKey: `key-${n % 3}` }),
      ),
    );
    const results = await Promise.all(handles.map((handle) => handle.getResult({ timeoutMs: 30_000 })));
    expect(results.sort()).toEqual(Array.from({ length: 12 }, (_, n) => `part-${n}`).sort());
    expect(tasks.mostAtOnceByKey).toBe(1);
  });

  it('holds a global concurrency of 1 exactly while 4 slots are free', async () => {
    tasks.mostAtOnce = 0;
    const handles = await Promise.all(
      [1, 2, 3, 4, 5, 6].map((n) => queues.enqueue('one-at-a-time', tasks.overlap, [`one-${n}`])),
    );
    await Promise.all(handles.map((handle) => handle.getResult({ timeoutMs: 30_000 })));
    expect(tasks.mostAtOnce).toBe(1);
    expect(tasks.ran.filter((label) => label.startsWith('one-')).sort()).toEqual([
      'one-1',
      'one-2',
      'one-3',
      'one-4',
      'one-5',
      'one-6',
    ]);
  });

  it('pauses and resumes a queue and overrides its limits at run time (a reference table row)', async () => {
    await queues.pauseQueue('tasks');
    expect(await queues.getQueueSettings('tasks')).toMatchObject({ paused: true, workerConcurrency: 8 });
    const handle = await queues.enqueue('tasks', tasks.overlap, ['while-paused']);
    // NOTE: a paused queue claims nothing: the workflow stays ENQUEUED past the enqueue's wake-up.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect((await handle.getStatus())?.status).toBe('ENQUEUED');

    await queues.setQueueLimits('tasks', { workerConcurrency: 2 });
    expect(await queues.getQueueSettings('tasks')).toMatchObject({ paused: true, workerConcurrency: 2 });
    const { rows } = await citus.coordinator.query<{ paused: boolean; worker_concurrency: number }>(
      `SELECT paused, worker_concurrency FROM "${schema}".queues WHERE queue_name = 'tasks'`,
    );
    expect(rows).toEqual([{ paused: true, worker_concurrency: 2 }]);

    await queues.resumeQueue('tasks');
    await expect(handle.getResult({ timeoutMs: 30_000 })).resolves.toBe('while-paused');
    await queues.setQueueLimits('tasks', { workerConcurrency: null });
    expect(await queues.getQueueSettings('tasks')).toMatchObject({ paused: false, workerConcurrency: 8 });
  });

  it('fires a runtime schedule and runs a triggered one', async () => {
    const schedules = app.get(ScheduleService);
    await schedules.create({
      name: 'every-second',
      cron: '* * * * * *',
      workflow: tasks.overlap,
      queue: 'tasks',
      args: ['tick'],
    });
    await waitFor(async () => (await schedules.get('every-second')).lastWorkflowId !== null, {
      what: 'the schedule to fire on the cluster',
      timeoutMs: 15_000,
    });
    await schedules.pause('every-second');
    const triggered = await schedules.trigger<string>('every-second');
    await expect(triggered.getResult({ timeoutMs: 20_000 })).resolves.toBe('tick');
    await schedules.remove('every-second');
  });

  it("serves the dashboard's API: queues, a workflow list, a workflow", async () => {
    const handle = await queues.enqueue('tasks', tasks.overlap, ['for-the-dashboard']);
    await handle.getResult({ timeoutMs: 20_000 });
    const server = app.getHttpServer();
    const queuesPage = await request(server).get('/queues/api/queues').expect(200);
    expect(JSON.stringify(queuesPage.body)).toContain('one-at-a-time');
    const list = await request(server).get('/queues/api/workflows').query({ queue: 'tasks' }).expect(200);
    expect(JSON.stringify(list.body)).toContain(handle.workflowId);
    const one = await request(server).get(`/queues/api/workflows/${handle.workflowId}`).expect(200);
    expect(one.body).toMatchObject({ workflowId: handle.workflowId, status: 'SUCCESS' });
  });

  it('lists workflows newest first as the view orders them, the history in windows', async () => {
    const handles = await Promise.all(
      ['list-1', 'list-2', 'list-3'].map((key) => queues.enqueue('tasks', tasks.overlap, [key])),
    );
    await Promise.all(handles.map((handle) => handle.getResult({ timeoutMs: 20_000 })));
    const expected = (
      await citus.coordinator.query<{ workflow_id: string }>(
        `SELECT workflow_id FROM "${schema}".workflows WHERE queue_name = 'tasks' AND status = 'SUCCESS'
         ORDER BY created_at DESC, seq DESC`,
      )
    ).rows.map((row) => row.workflow_id);
    expect(expected.length).toBeGreaterThanOrEqual(3);
    const listed = await queues.list({ queueName: 'tasks', status: 'SUCCESS', limit: 1000 });
    expect(listed.map((workflow) => workflow.workflowId)).toEqual(expected);
    expect(
      (await queues.list({ queueName: 'tasks', status: 'SUCCESS', limit: 2, offset: 1 })).map((w) => w.workflowId),
    ).toEqual(expected.slice(1, 3));
  });

  it('recovers the workflow of a worker process SIGKILLed mid-run, in another process, once', async () => {
    await citus.coordinator.query(
      `CREATE TABLE "${schema}".events (seq bigserial, kind text NOT NULL, key text NOT NULL)`,
    );
    await citus.coordinator.query(`CREATE TABLE "${schema}".release (key text PRIMARY KEY)`);
    const child: FixtureProcess = spawnFixture('child-worker.ts', 'citus-worker', {
      DATABASE_URL: citus.cluster.url,
      SCHEMA: schema,
      DISTRIBUTION: 'citus',
      APPLICATION_NAME: 'citus-crash-worker',
    });
    await child.message('ready');
    const handle = await queues.enqueue('sigterm', app.get(HoldingTasks).hold, ['k1']);
    await waitFor(
      async () =>
        (await citus.coordinator.query(`SELECT 1 FROM "${schema}".events WHERE kind = 'started'`)).rowCount === 1,
      { what: 'the child to start the workflow', timeoutMs: 30_000 },
    );
    child.child.kill('SIGKILL');
    await child.ended;

    const recovering = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: citus.cluster.url },
          distribution: 'citus',
          schema,
          queues: [{ name: 'sigterm' }],
          leaseMs: 2000,
          heartbeatIntervalMs: 300,
        }),
      ],
      providers: [HoldingTasks],
    }).compile();
    await recovering.init();
    try {
      await expect(handle.getResult({ timeoutMs: 30_000 })).resolves.toBe('recovered k1');
      const { rows } = await citus.coordinator.query(
        `SELECT status, recovery_attempts FROM "${schema}".workflows WHERE workflow_id = $1`,
        [handle.workflowId],
      );
      expect(rows).toEqual([{ status: 'SUCCESS', recovery_attempts: 1 }]);
    } finally {
      await recovering.close();
    }
  });
});
