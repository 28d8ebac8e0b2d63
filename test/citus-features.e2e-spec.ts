/**
 * The module's features on a Citus cluster (`distribution: 'citus'`), beyond the hot statements
 * (citus-statements.e2e-spec.ts) and the deduplication race and node failure (citus-guarantees.e2e-spec.ts): wake-ups
 * by NOTIFY from the coordinator (polling is set to a minute, so only a delivered notification can start a workflow
 * in time), a global concurrency limit held exactly, a runtime schedule that fires and is triggered, the dashboard's
 * API over HTTP, and crash recovery: a worker process SIGKILLed mid-run, its workflow recovered by another process.
 */
import { INestApplication, Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { DedupQueueDashboardModule, DedupQueueModule, QueueService, ScheduleService, Workflow } from 'nest-dedup-queue';
import { Pool } from 'pg';
import request from 'supertest';
import { FixtureProcess, killFixtures, spawnFixture } from './fixtures/child-harness';
import { CitusCluster, startCitusCluster } from './support/citus-cluster';
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
  let cluster: CitusCluster;
  let pool: Pool;
  let app: INestApplication;
  let queues: QueueService;
  let tasks: CountingTasks;

  beforeAll(async () => {
    cluster = await startCitusCluster();
    pool = new Pool({ connectionString: cluster.url, max: 2 });
    pool.on('error', () => undefined);
    const module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: cluster.url },
          distribution: 'citus',
          schema,
          queues: [
            { name: 'tasks', workerConcurrency: 8 },
            { name: 'one-at-a-time', concurrency: 1, workerConcurrency: 4 },
            { name: 'sigterm' },
          ],
          worker: { queues: ['tasks', 'one-at-a-time'] },
          pollIntervalMs: 60_000,
        }),
        DedupQueueDashboardModule.forRoot({ path: '/queues' }),
      ],
      providers: [CountingTasks, HoldingTasks],
    }).compile();
    app = module.createNestApplication({ logger: ['error'] });
    await app.init();
    queues = app.get(QueueService);
    tasks = app.get(CountingTasks);
  });

  afterAll(async () => {
    await killFixtures();
    await app?.close();
    await pool?.end();
    await cluster?.stop();
  });

  it('starts an enqueued workflow by NOTIFY from the coordinator, well before the minute-long poll', async () => {
    // The first claims after boot are behind us: from now on only a wake-up can start a workflow in time.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const startedAt = Date.now();
    const handle = await queues.enqueue('tasks', tasks.overlap, ['woken']);
    await expect(handle.getResult({ timeoutMs: 30_000 })).resolves.toBe('woken');
    expect(Date.now() - startedAt).toBeLessThan(10_000);
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

  it('recovers the workflow of a worker process SIGKILLed mid-run, in another process, once', async () => {
    await pool.query(`CREATE TABLE "${schema}".events (seq bigserial, kind text NOT NULL, key text NOT NULL)`);
    await pool.query(`CREATE TABLE "${schema}".release (key text PRIMARY KEY)`);
    const child: FixtureProcess = spawnFixture('child-worker.ts', 'citus-worker', {
      DATABASE_URL: cluster.url,
      SCHEMA: schema,
      DISTRIBUTION: 'citus',
      APPLICATION_NAME: 'citus-crash-worker',
    });
    await child.message('ready');
    const handle = await queues.enqueue('sigterm', app.get(HoldingTasks).hold, ['k1']);
    await waitFor(
      async () => (await pool.query(`SELECT 1 FROM "${schema}".events WHERE kind = 'started'`)).rowCount === 1,
      { what: 'the child to start the workflow', timeoutMs: 30_000 },
    );
    child.child.kill('SIGKILL');
    await child.ended;

    const recovering = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url: cluster.url },
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
      const { rows } = await pool.query(
        `SELECT status, recovery_attempts FROM "${schema}".workflows WHERE workflow_id = $1`,
        [handle.workflowId],
      );
      expect(rows).toEqual([{ status: 'SUCCESS', recovery_attempts: 1 }]);
    } finally {
      await recovering.close();
    }
  });
});
