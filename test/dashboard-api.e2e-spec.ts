import type { INestApplication } from '@nestjs/common';
import { QueueService, ScheduleService } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import request from 'supertest';
import { AdminKeyGuard, AdminKeyModule, DashboardApp, DenyAllGuard, startDashboardApp } from './fixtures/dashboard-app';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { waitFor } from './support/wait-for';

const REPORT = 'DashboardTasks.report';
const BROKEN = 'DashboardTasks.broken';
const COUNT_KEYS = [
  'ENQUEUED',
  'DELAYED',
  'PENDING',
  'WAITING',
  'SUCCESS',
  'ERROR',
  'CANCELLED',
  'MAX_RECOVERY_ATTEMPTS_EXCEEDED',
];

describe('dashboard admin API over HTTP (Express)', () => {
  const schema = uniqueSchema('dash_api');
  let pool: Pool;
  let started: DashboardApp;
  let app: INestApplication;
  let queues: QueueService;
  const ids: Record<string, string> = {};
  const json = { 'content-type': 'application/json' };

  const statusInDb = async (id: string) =>
    (await pool.query(`SELECT status FROM "${schema}".workflows WHERE workflow_id = $1`, [id])).rows[0]?.status;
  const api = () => request(app.getHttpServer());
  const post = (path: string, body: unknown = {}) =>
    api()
      .post(`/queues/api${path}`)
      .set(json)
      .send(body as object);

  beforeAll(async () => {
    pool = testPool();
    started = await startDashboardApp(schema);
    ({ app, queues } = started);
    ids.done1 = (await queues.enqueue('work', REPORT, ['u1'], { deduplicationId: 'user-1' })).workflowId;
    ids.done2 = (await queues.enqueue('work', REPORT, ['u2'])).workflowId;
    ids.failed = (await queues.enqueue('work', BROKEN, ['u3'], { deduplicationId: 'user-3' })).workflowId;
    for (const id of [ids.done1, ids.done2, ids.failed]) {
      await waitFor(async () => ['SUCCESS', 'ERROR'].includes(await statusInDb(id)), { what: `${id} to finish` });
    }
    for (let i = 1; i <= 5; i++) {
      ids[`held${i}`] = (await queues.enqueue('held', REPORT, [`h${i}`], { deduplicationId: `user-${i}` })).workflowId;
    }
    ids.cancelled1 = (await queues.enqueue('held', REPORT, ['c1'], { deduplicationId: 'user-c1' })).workflowId;
    ids.cancelled2 = (await queues.enqueue('held', BROKEN, ['c2'])).workflowId;
    await queues.cancel(ids.cancelled1);
    await queues.cancel(ids.cancelled2);
    for (const key of ['t1', 't2', 't1']) {
      await queues.enqueue('tenants', REPORT, [key], { partitionKey: key });
    }
  });

  afterAll(async () => {
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  describe('GET /queues/api/queues', () => {
    it('gives every declared queue with its exact counts per status, paused flag, limits and recent throughput', async () => {
      const { body } = await api().get('/queues/api/queues').expect(200);
      const counts = (values: Record<string, number>) =>
        Object.fromEntries(COUNT_KEYS.map((status) => [status, { value: values[status] ?? 0, exact: true }]));
      expect(body.queues).toEqual([
        {
          name: 'work',
          paused: false,
          limits: { workerConcurrency: 10 },
          counts: counts({ SUCCESS: 2, ERROR: 1 }),
          finished: { lastMinute: 3, last5Minutes: 3 },
        },
        {
          name: 'held',
          paused: false,
          limits: { workerConcurrency: 10 },
          counts: counts({ ENQUEUED: 5, CANCELLED: 2 }),
          finished: { lastMinute: 2, last5Minutes: 2 },
        },
        {
          name: 'tenants',
          paused: false,
          limits: { workerConcurrency: 10, partitionConcurrency: 1 },
          counts: counts({ ENQUEUED: 3 }),
          finished: { lastMinute: 0, last5Minutes: 0 },
        },
      ]);
    });
  });

  describe('GET /queues/api/workflows', () => {
    const list = async (query: string) => (await api().get(`/queues/api/workflows?${query}`).expect(200)).body;
    const idsOf = (page: { workflows: Array<{ workflowId: string }> }) =>
      page.workflows.map((w) => w.workflowId).sort();
    const sorted = (...keys: string[]) => keys.map((key) => ids[key]).sort();

    it('filters by queue, status (one or several), workflow name, deduplication ID and partition key, with totals', async () => {
      const held = await list('queue=held');
      expect(idsOf(held)).toEqual(sorted('held1', 'held2', 'held3', 'held4', 'held5', 'cancelled1', 'cancelled2'));
      expect(held.total).toEqual({ value: 7, exact: true });
      expect(held.nextCursor).toBeNull();

      expect(idsOf(await list('queue=held&status=CANCELLED'))).toEqual(sorted('cancelled1', 'cancelled2'));
      expect(idsOf(await list('status=SUCCESS,ERROR'))).toEqual(sorted('done1', 'done2', 'failed'));
      expect((await list('status=SUCCESS,ERROR')).total).toEqual({ value: 3, exact: true });
      expect(idsOf(await list(`workflowName=${BROKEN}`))).toEqual(sorted('failed', 'cancelled2'));
      expect(idsOf(await list(`workflowName=${BROKEN}&queue=work`))).toEqual(sorted('failed'));
      expect(idsOf(await list('deduplicationId=user-1'))).toEqual(sorted('done1', 'held1'));
      expect(idsOf(await list('deduplicationId=user-1&status=ENQUEUED'))).toEqual(sorted('held1'));

      const tenants = await list('partitionKey=t1');
      expect(
        tenants.workflows.map((w: { partitionKey: string; queueName: string }) => [w.queueName, w.partitionKey]),
      ).toEqual([
        ['tenants', 't1'],
        ['tenants', 't1'],
      ]);
      expect(tenants.total).toEqual({ value: 2, exact: true });
      expect((await list('queue=work&status=PENDING')).workflows).toEqual([]);
    });

    it('gives each row its summary, and marks the holder of a deduplication ID', async () => {
      const page = await list('deduplicationId=user-1');
      const holder = page.workflows.find((w: { workflowId: string }) => w.workflowId === ids.held1);
      const finished = page.workflows.find((w: { workflowId: string }) => w.workflowId === ids.done1);
      expect(holder).toEqual({
        workflowId: ids.held1,
        queueName: 'held',
        workflowName: REPORT,
        version: 1,
        forkedFrom: null,
        status: 'ENQUEUED',
        deduplicationId: 'user-1',
        holdsDeduplicationId: true,
        partitionKey: null,
        priority: 0,
        attempts: 0,
        executorId: null,
        createdAt: expect.any(String),
        startedAt: null,
        completedAt: null,
        notBefore: null,
        parentWorkflowId: null,
      });
      expect(finished).toMatchObject({
        status: 'SUCCESS',
        holdsDeduplicationId: false,
        attempts: 1,
        executorId: expect.any(String),
      });
    });

    it('searches by workflow ID or deduplication ID', async () => {
      expect(idsOf(await list(`search=${ids.failed}`))).toEqual(sorted('failed'));
      expect(idsOf(await list('search=user-3'))).toEqual(sorted('failed', 'held3'));
      expect(idsOf(await list('search=nobody'))).toEqual([]);
    });

    it('filters by a time range of creation', async () => {
      const { rows } = await pool.query(`SELECT created_at FROM "${schema}".workflows WHERE workflow_id = $1`, [
        ids.held3,
      ]);
      const at = rows[0].created_at as Date;
      const expected = (
        await pool.query(`SELECT workflow_id FROM "${schema}".workflows WHERE created_at >= $1`, [at])
      ).rows
        .map((row) => row.workflow_id)
        .sort();
      const after = await list(`createdFrom=${encodeURIComponent(at.toISOString())}`);
      expect(idsOf(after)).toEqual(expected);
      const before = await list(`createdTo=${encodeURIComponent(new Date(at.getTime() - 3_600_000).toISOString())}`);
      expect(before.workflows).toEqual([]);
      expect(before.total).toEqual({ value: 0, exact: true });
    });

    it('walks every page of a list newest first, without duplicates or omissions (ties on created_at included)', async () => {
      await queues.enqueueMany(
        'held',
        REPORT,
        Array.from({ length: 95 }, (_, i) => ({ args: [`bulk-${i}`] })),
      );
      const walks: Array<[string, string]> = [
        ['queue=held', `queue_name = 'held'`],
        ['queue=held&status=ENQUEUED,CANCELLED', `queue_name = 'held'`],
        [`workflowName=${REPORT}&queue=held`, `queue_name = 'held' AND workflow_name = '${REPORT}'`],
        ['status=ENQUEUED', `status = 'ENQUEUED'`],
      ];
      for (const [query, where] of walks) {
        const expected = (
          await pool.query(
            `SELECT workflow_id FROM "${schema}".workflows WHERE ${where} ORDER BY created_at DESC, seq DESC`,
          )
        ).rows.map((row) => row.workflow_id);
        expect(expected.length).toBeGreaterThan(95);
        const walked: string[] = [];
        let cursor: string | null = null;
        let pages = 0;
        do {
          const page = await list(`${query}&limit=7${cursor ? `&cursor=${cursor}` : ''}`);
          expect(page.total).toEqual({ value: expected.length, exact: true });
          expect(page.workflows.length).toBeLessThanOrEqual(7);
          walked.push(...page.workflows.map((w: { workflowId: string }) => w.workflowId));
          cursor = page.nextCursor;
          pages++;
        } while (cursor);
        expect(walked).toEqual(expected);
        expect(pages).toBe(Math.ceil(expected.length / 7));
      }
    });

    it('caps the total at 10,000 ("10,000+") and estimates the counts per status past 1,000', async () => {
      await pool.query(
        `INSERT INTO "${schema}".workflow_history (workflow_id, queue_name, workflow_name, status, inputs, completed_at)
         SELECT 'seeded-' || i, 'tenants', $1, 'SUCCESS', '[]', now() - interval '1 hour' FROM generate_series(1, 10050) AS i`,
        [REPORT],
      );
      await pool.query(`ANALYZE "${schema}".workflow_history`);
      const page = await list('queue=tenants');
      expect(page.total).toEqual({ value: 10_000, exact: false });
      expect(page.workflows).toHaveLength(50);
      const { body } = await api().get('/queues/api/queues').expect(200);
      const tenants = body.queues.find((queue: { name: string }) => queue.name === 'tenants');
      expect(tenants.counts.SUCCESS).toEqual({ value: 1000, exact: false, estimate: expect.any(Number) });
      expect(tenants.counts.SUCCESS.estimate).toBeGreaterThan(5000);
      expect(tenants.counts.ENQUEUED).toEqual({ value: 3, exact: true });
      await pool.query(`DELETE FROM "${schema}".workflow_history WHERE workflow_id LIKE 'seeded-%'`);
    });

    it('refuses unknown filters, statuses, queues, bad limits, dates and cursors with 400/404 and a message', async () => {
      const refuse = async (query: string, status: number, field?: string) => {
        const { body } = await api().get(`/queues/api/workflows?${query}`).expect(status);
        expect(body).toEqual({
          statusCode: status,
          error: expect.any(String),
          message: expect.any(String),
          ...(field ? { field } : {}),
        });
        return body;
      };
      expect((await refuse('colour=red', 400, 'colour')).error).toBe('Bad Request');
      expect((await refuse('status=DONE', 400, 'status')).message).toContain('"DONE" is not a status');
      await refuse('limit=0', 400, 'limit');
      await refuse('limit=abc', 400, 'limit');
      await refuse('cursor=xyz', 400, 'cursor');
      await refuse('createdFrom=yesterday', 400, 'createdFrom');
      await refuse('queue=a&queue=b', 400, 'queue');
      expect((await refuse('queue=nope', 404)).error).toBe('Not Found');
    });
  });

  describe('GET /queues/api/workflows/:id', () => {
    it('gives inputs, result, attempts, executor, timestamps and the steps with their outputs and durations', async () => {
      const { body } = await api().get(`/queues/api/workflows/${ids.done1}`).expect(200);
      expect(body).toMatchObject({
        workflowId: ids.done1,
        queueName: 'work',
        workflowName: REPORT,
        status: 'SUCCESS',
        inputs: ['u1'],
        output: { report: 'report for u1 (pro)' },
        error: null,
        attempts: 1,
        failedAttempts: 0,
        maxAttempts: 1,
        executorId: expect.any(String),
        createdAt: expect.any(String),
        startedAt: expect.any(String),
        completedAt: expect.any(String),
      });
      expect(body.steps).toEqual([
        {
          index: 0,
          name: 'DashboardTasks.load',
          output: { userId: 'u1', plan: 'pro' },
          error: null,
          startedAt: expect.any(String),
          completedAt: expect.any(String),
          durationMs: expect.any(Number),
        },
        {
          index: 1,
          name: 'DashboardTasks.render',
          output: 'report for u1 (pro)',
          error: null,
          startedAt: expect.any(String),
          completedAt: expect.any(String),
          durationMs: expect.any(Number),
        },
      ]);
      for (const step of body.steps) {
        expect(step.durationMs).toBeGreaterThanOrEqual(0);
        expect(Date.parse(step.completedAt)).toBeGreaterThanOrEqual(Date.parse(step.startedAt));
      }
    });

    it('gives a failed workflow its error and its failed step, without stacks by default', async () => {
      const { body } = await api().get(`/queues/api/workflows/${ids.failed}`).expect(200);
      expect(body.status).toBe('ERROR');
      expect(body.error).toEqual({ name: 'TypeError', message: 'no report for u3' });
      expect(body.steps.map((step: { name: string; error: unknown }) => [step.name, step.error])).toEqual([
        ['DashboardTasks.load', null],
        ['DashboardTasks.explode', { name: 'TypeError', message: 'no report for u3' }],
      ]);
      expect(JSON.stringify(body)).not.toContain('at ');
    });

    it("gives a workflow's streams with their size, state and last values, and pages through one", async () => {
      const handle = await queues.enqueue('work', 'DashboardTasks.streaming', [12]);
      await handle.getResult({ timeoutMs: 10_000 });
      const { body } = await api().get(`/queues/api/workflows/${handle.workflowId}`).expect(200);
      expect(body.streams).toEqual([
        {
          key: 'status',
          values: 1,
          bytes: 11,
          closed: true,
          lastWrittenAt: expect.any(String),
          recent: [{ offset: 0, value: { ok: true } }],
        },
        {
          key: 'tokens',
          values: 12,
          bytes: 10 * 4 + 2 * 5,
          closed: true,
          lastWrittenAt: expect.any(String),
          recent: Array.from({ length: 10 }, (_, index) => ({ offset: index + 2, value: `t${index + 2}` })),
        },
      ]);
      const first = await api().get(`/queues/api/workflows/${handle.workflowId}/streams/tokens?limit=5`).expect(200);
      expect(first.body).toEqual({
        key: 'tokens',
        values: Array.from({ length: 5 }, (_, index) => ({ offset: index, value: `t${index}` })),
        nextOffset: 5,
        ended: false,
      });
      const last = await api().get(`/queues/api/workflows/${handle.workflowId}/streams/tokens?offset=10`).expect(200);
      expect(last.body).toEqual({
        key: 'tokens',
        values: [
          { offset: 10, value: 't10' },
          { offset: 11, value: 't11' },
        ],
        nextOffset: 12,
        ended: true,
      });
      await api().get(`/queues/api/workflows/${handle.workflowId}/streams/tokens?offset=-1`).expect(400);
      await api().get('/queues/api/workflows/nope/streams/tokens').expect(404);
    });

    it('answers 404 with the typed error for an unknown ID', async () => {
      const { body } = await api().get('/queues/api/workflows/nope').expect(404);
      expect(body).toEqual({
        statusCode: 404,
        error: 'Not Found',
        message: 'Workflow "nope" does not exist',
      });
    });
  });

  describe('workflow actions', () => {
    it('cancels an ENQUEUED workflow and frees its key; an unknown ID is 404; a finished one keeps its status', async () => {
      const { body } = await post(`/workflows/${ids.held2}/cancel`).expect(200);
      expect(body).toEqual({ workflowId: ids.held2, status: 'CANCELLED' });
      expect(await statusInDb(ids.held2)).toBe('CANCELLED');
      const freed = await pool.query(
        `SELECT active_deduplication_id FROM "${schema}".workflows WHERE workflow_id = $1`,
        [ids.held2],
      );
      expect(freed.rows[0].active_deduplication_id).toBeNull();
      expect((await post(`/workflows/${ids.done2}/cancel`).expect(200)).body).toEqual({
        workflowId: ids.done2,
        status: 'SUCCESS',
      });
      expect(await statusInDb(ids.done2)).toBe('SUCCESS');
      expect((await post('/workflows/nope/cancel').expect(404)).body.error).toBe('Not Found');
    });

    it('resumes a CANCELLED workflow (ENQUEUED again, holding its key); refuses a SUCCESS one (400) and a taken key (409)', async () => {
      expect((await post(`/workflows/${ids.held2}/resume`).expect(200)).body).toEqual({
        workflowId: ids.held2,
        status: 'ENQUEUED',
      });
      expect(await statusInDb(ids.held2)).toBe('ENQUEUED');

      const refused = await post(`/workflows/${ids.done1}/resume`).expect(400);
      expect(refused.body).toMatchObject({ statusCode: 400, error: 'Bad Request', field: 'workflowId' });
      expect(await statusInDb(ids.done1)).toBe('SUCCESS');

      const taker = await queues.enqueue('held', REPORT, ['again'], { deduplicationId: 'user-c1' });
      const conflict = await post(`/workflows/${ids.cancelled1}/resume`).expect(409);
      expect(conflict.body).toEqual({
        statusCode: 409,
        error: 'Conflict',
        message: expect.any(String),
        queueName: 'held',
        deduplicationId: 'user-c1',
        existingWorkflowId: taker.workflowId,
        existingStatus: 'ENQUEUED',
      });
      expect(await statusInDb(ids.cancelled1)).toBe('CANCELLED');
    });

    it('forks a workflow from its failed step (201, the same fork on a retry), by filter, and reports the versions', async () => {
      const { body } = await post(`/workflows/${ids.failed}/fork`).expect(201);
      expect(body).toEqual({ workflowId: `${ids.failed}-fork-1`, forkedFrom: ids.failed, created: true });
      expect((await post(`/workflows/${ids.failed}/fork`).expect(201)).body).toMatchObject({ created: false });
      await waitFor(async () => (await statusInDb(body.workflowId)) === 'ERROR', { what: 'the fork to fail too' });
      const detail = (await api().get(`/queues/api/workflows/${body.workflowId}`).expect(200)).body;
      expect(detail).toMatchObject({ forkedFrom: ids.failed, version: 1 });
      await post(`/workflows/${ids.failed}/fork`, { fromStep: 'soon' }).expect(400);
      await post(`/workflows/${ids.failed}/fork`, { colour: 'red' }).expect(400);
      await post('/workflows/nope/fork').expect(404);

      const { body: many } = await post('/workflows/fork-matching', {
        workflowIds: [ids.failed, body.workflowId],
        fromStep: 0,
      }).expect(200);
      expect(many.results).toEqual([
        { workflowId: ids.failed, outcome: 'forked', forkWorkflowId: `${ids.failed}-fork-0` },
        // Both hold key user-3 when they run: the first fork takes it.
        { workflowId: body.workflowId, outcome: 'key-held' },
      ]);
      await post('/workflows/fork-matching', {}).expect(400);

      const versions = (await api().get('/queues/api/versions').expect(200)).body;
      expect(versions.versions).toEqual(
        expect.arrayContaining([{ workflowName: BROKEN, version: 1, unfinished: expect.any(Number), executors: 1 }]),
      );
      expect(versions).toMatchObject({ stranded: expect.any(Array), checkedAt: expect.any(String) });
    });

    it('re-runs a workflow as a new one with the same queue, workflow, inputs and key; a held key answers 409', async () => {
      const { body } = await post(`/workflows/${ids.done1}/rerun`).expect(201);
      expect(body).toEqual({ workflowId: expect.any(String), rerunOf: ids.done1 });
      expect(body.workflowId).not.toBe(ids.done1);
      const { rows } = await pool.query(
        `SELECT queue_name, workflow_name, inputs, deduplication_id FROM "${schema}".workflows WHERE workflow_id = $1`,
        [body.workflowId],
      );
      expect(rows).toEqual([{ queue_name: 'work', workflow_name: REPORT, inputs: ['u1'], deduplication_id: 'user-1' }]);
      await waitFor(async () => (await statusInDb(body.workflowId)) === 'SUCCESS', { what: 'the re-run to finish' });

      const before = (await pool.query(`SELECT count(*)::int AS n FROM "${schema}".workflows`)).rows[0].n;
      const conflict = await post(`/workflows/${ids.held1}/rerun`).expect(409);
      expect(conflict.body).toMatchObject({
        statusCode: 409,
        deduplicationId: 'user-1',
        existingWorkflowId: ids.held1,
        existingStatus: 'ENQUEUED',
      });
      expect((await pool.query(`SELECT count(*)::int AS n FROM "${schema}".workflows`)).rows[0].n).toBe(before);
      await post('/workflows/nope/rerun').expect(404);
    });

    it('reschedules an ENQUEUED workflow (start time and priority); refuses bad values and finished workflows', async () => {
      const { body } = await post(`/workflows/${ids.held3}/reschedule`, { delayMs: 3_600_000, priority: 5 }).expect(
        200,
      );
      expect(body).toMatchObject({
        workflowId: ids.held3,
        status: 'DELAYED',
        priority: 5,
        notBefore: expect.any(String),
      });
      const { rows } = await pool.query(
        `SELECT priority, not_before > now() + interval '59 minutes' AS later FROM "${schema}".workflows WHERE workflow_id = $1`,
        [ids.held3],
      );
      expect(rows[0]).toEqual({ priority: 5, later: true });
      const runAt = new Date(Date.now() + 7_200_000).toISOString();
      expect((await post(`/workflows/${ids.held3}/reschedule`, { runAt }).expect(200)).body.notBefore).toBe(runAt);
      const delayed = (await api().get('/queues/api/workflows?queue=held&status=DELAYED').expect(200)).body;
      expect(delayed.workflows.map((w: { workflowId: string }) => w.workflowId)).toEqual([ids.held3]);
      const ready = (await api().get('/queues/api/workflows?queue=held&status=ENQUEUED&limit=500').expect(200)).body;
      expect(ready.workflows.map((w: { workflowId: string }) => w.workflowId)).not.toContain(ids.held3);
      const held = (await api().get('/queues/api/queues').expect(200)).body.queues[1];
      expect(held.counts.DELAYED).toEqual({ value: 1, exact: true });

      expect((await post(`/workflows/${ids.held3}/reschedule`, { priority: 'high' }).expect(400)).body.error).toBe(
        'Bad Request',
      );
      expect((await post(`/workflows/${ids.held3}/reschedule`, { delayMs: -5 }).expect(400)).body.error).toBe(
        'Bad Request',
      );
      expect((await post(`/workflows/${ids.held3}/reschedule`, { when: 'soon' }).expect(400)).body.field).toBe('when');
      expect((await post(`/workflows/${ids.held3}/reschedule`, {}).expect(400)).body.field).toBe('body');
      expect((await post(`/workflows/${ids.held3}/reschedule`, { runAt: 'tomorrow' }).expect(400)).body.field).toBe(
        'runAt',
      );
      expect((await post(`/workflows/${ids.done1}/reschedule`, { priority: 1 }).expect(400)).body.message).toContain(
        'SUCCESS',
      );
      expect((await post('/workflows/nope/reschedule', { priority: 1 }).expect(404)).body.error).toBe('Not Found');
      expect(
        (await pool.query(`SELECT priority FROM "${schema}".workflows WHERE workflow_id = $1`, [ids.held3])).rows[0]
          .priority,
      ).toBe(5);
    });

    it('refuses malformed JSON (400) and actions that are not JSON requests (415)', async () => {
      const malformed = await api()
        .post(`/queues/api/workflows/${ids.held3}/reschedule`)
        .set(json)
        .send('{"priority": ')
        .expect(400);
      expect(JSON.stringify(malformed.body)).not.toMatch(/\bat\b.*\.js/);
      await api()
        .post(`/queues/api/workflows/${ids.held4}/cancel`)
        .set('content-type', 'text/plain')
        .send('x')
        .expect(415);
      await api().post(`/queues/api/workflows/${ids.held4}/cancel`).expect(415);
      expect(await statusInDb(ids.held4)).toBe('ENQUEUED');
    });
  });

  describe('queue actions', () => {
    const queueRow = async (name: string) =>
      (await pool.query(`SELECT * FROM "${schema}".queues WHERE queue_name = $1`, [name])).rows[0];

    it('pauses and resumes a queue', async () => {
      expect((await post('/queues/held/pause').expect(200)).body).toMatchObject({ name: 'held', paused: true });
      expect((await queueRow('held')).paused).toBe(true);
      expect((await post('/queues/held/resume').expect(200)).body).toMatchObject({ name: 'held', paused: false });
      expect((await queueRow('held')).paused).toBe(false);
      expect((await post('/queues/nope/pause').expect(404)).body.error).toBe('Not Found');
    });

    it('changes limits (null: back to the declared value) and refuses bad ones', async () => {
      const changed = await api()
        .patch('/queues/api/queues/tenants/limits')
        .set(json)
        .send({ concurrency: 4, rateLimit: { limit: 10, periodMs: 1000 } })
        .expect(200);
      expect(changed.body.limits).toEqual({
        concurrency: 4,
        workerConcurrency: 10,
        partitionConcurrency: 1,
        rateLimit: { limit: 10, periodMs: 1000 },
      });
      expect(await queueRow('tenants')).toMatchObject({ concurrency: 4, rate_limit: 10, rate_period_ms: 1000 });

      const reset = await api()
        .patch('/queues/api/queues/tenants/limits')
        .set(json)
        .send({ concurrency: null, rateLimit: null })
        .expect(200);
      expect(reset.body.limits).toEqual({ workerConcurrency: 10, partitionConcurrency: 1 });
      expect(await queueRow('tenants')).toMatchObject({ concurrency: null, rate_limit: null });

      for (const bad of [
        { concurrency: 0 },
        { concurrency: 'many' },
        { rateLimit: { limit: 5 } },
        { speed: 3 },
        {},
        [1],
      ]) {
        const { body } = await api().patch('/queues/api/queues/tenants/limits').set(json).send(bad).expect(400);
        expect(body.error).toBe('Bad Request');
      }
      expect(await queueRow('tenants')).toMatchObject({ concurrency: null, rate_limit: null });
      await api().patch('/queues/api/queues/nope/limits').set(json).send({ concurrency: 1 }).expect(404);
    });
  });

  describe('schedules', () => {
    it('lists the schedules as ScheduleService does, pauses, resumes and triggers one; an unknown one is 404', async () => {
      const schedules = app.get(ScheduleService);
      await schedules.create({ name: 'api-nightly', cron: '0 3 * * *', workflow: REPORT, queue: 'held' });
      const [listed] = await schedules.list();
      const { body } = await api().get('/queues/api/schedules').expect(200);
      expect(body.schedules).toEqual([
        {
          name: 'api-nightly',
          cron: '0 3 * * *',
          timezone: null,
          source: 'runtime',
          workflowName: REPORT,
          queueName: 'held',
          paused: false,
          nextRunAt: listed.nextRunAt?.toISOString(),
          lastRunAt: null,
          lastWorkflowId: null,
        },
      ]);
      expect((await post('/schedules/api-nightly/pause').expect(200)).body).toMatchObject({
        paused: true,
        nextRunAt: null,
      });
      expect((await post('/schedules/api-nightly/resume').expect(200)).body).toMatchObject({ paused: false });
      const triggered = (await post('/schedules/api-nightly/trigger').expect(201)).body;
      expect(triggered).toEqual({ name: 'api-nightly', workflowId: expect.any(String) });
      expect((await schedules.get('api-nightly')).lastWorkflowId).toBe(triggered.workflowId);
      await queues.cancel(triggered.workflowId);
      await schedules.remove('api-nightly');

      const missing = await post('/schedules/nowhere/pause').expect(404);
      expect(missing.body.message).toContain('nowhere');
      await post('/schedules/nowhere/trigger').expect(404);
      await api().post('/queues/api/schedules/api-nightly/trigger').expect(415);
    });
  });

  describe('the page', () => {
    it('is served at the path as one self-contained HTML document with a strict content security policy', async () => {
      const response = await api().get('/queues').expect(200);
      expect(response.headers['content-type']).toMatch(/^text\/html/);
      expect(response.headers['content-security-policy']).toMatch(/default-src 'none'; script-src 'sha256-/);
      expect(response.text).toContain('<label for="search">Search</label>');
      expect(response.text).not.toMatch(/<script[^>]+src=|<link[^>]+href="(?!data:)|https?:\/\//);
    });
  });
});

describe('dashboard options and guards', () => {
  const schema = uniqueSchema('dash_guard');
  let pool: Pool;
  const apps: INestApplication[] = [];
  const start = async (...args: Parameters<typeof startDashboardApp>) => {
    const started = await startDashboardApp(...args);
    apps.push(started.app);
    return started;
  };

  beforeAll(() => {
    pool = testPool();
  });

  afterAll(async () => {
    for (const app of apps) await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('runs an app guard (resolved through DI with the modules given in imports) before the page and every API route', async () => {
    const { app, queues } = await start(schema, {
      path: '/admin/jobs',
      guards: [AdminKeyGuard],
      imports: [AdminKeyModule],
    });
    const id = (await queues.enqueue('held', REPORT, ['g'])).workflowId;
    const server = app.getHttpServer();
    await request(server).get('/admin/jobs').expect(403);
    await request(server).get('/admin/jobs/api/queues').expect(403);
    await request(server).get(`/admin/jobs/api/workflows/${id}`).expect(403);
    await request(server)
      .post(`/admin/jobs/api/workflows/${id}/cancel`)
      .set('content-type', 'application/json')
      .send({})
      .expect(403);
    expect(
      (await pool.query(`SELECT status FROM "${schema}".workflows WHERE workflow_id = $1`, [id])).rows[0].status,
    ).toBe('ENQUEUED');
    await request(server).get('/admin/jobs').set('x-admin-key', 's3cret').expect(200);
    await request(server).get('/admin/jobs/api/queues').set('x-admin-key', 's3cret').expect(200);
    await request(server).get('/queues').expect(404);
  });

  it('shows error stacks only with showErrorStacks, in an app of its own next to another (no shared state)', async () => {
    const shown = await start(schema, { path: '/with-stacks', showErrorStacks: true });
    const hidden = await start(schema, { path: '/queues', guards: [DenyAllGuard] });
    const id = (await shown.queues.enqueue('work', BROKEN, ['s'])).workflowId;
    const { body } = await waitFor(
      async () => {
        const response = await request(shown.app.getHttpServer()).get(`/with-stacks/api/workflows/${id}`).expect(200);
        return response.body.status === 'ERROR' && response;
      },
      { what: 'the broken workflow to fail' },
    );
    expect(body.error.stack).toContain('TypeError: no report for s');
    expect(body.steps[1].error.stack).toContain('TypeError: no report for s');
    await request(hidden.app.getHttpServer()).get('/queues').expect(403);
    await request(hidden.app.getHttpServer()).get('/with-stacks').expect(404);
    await request(shown.app.getHttpServer()).get('/queues').expect(404);
  });

  it('refuses a bad path at boot', async () => {
    const { DedupQueueDashboardModule } = await import('nest-dedup-queue');
    expect(() => DedupQueueDashboardModule.forRoot({ path: '/a b' })).toThrow(
      /`path` "\/a b" must be a plain URL path/,
    );
    expect(() => DedupQueueDashboardModule.forRoot({ guards: [undefined as never] })).toThrow(/guards/);
  });
});

describe('dashboard on Fastify', () => {
  const schema = uniqueSchema('dash_fastify');
  let pool: Pool;
  let open: DashboardApp;
  let guarded: DashboardApp;

  beforeAll(async () => {
    pool = testPool();
    open = await startDashboardApp(schema, {}, 'fastify');
    guarded = await startDashboardApp(schema, { path: '/guarded', guards: [DenyAllGuard] }, 'fastify');
  });

  afterAll(async () => {
    await open.app.close();
    await guarded.app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('serves the page, the API, its typed errors and the guard', async () => {
    const server = open.app.getHttpServer();
    const page = await request(server).get('/queues').expect(200);
    expect(page.headers['content-type']).toMatch(/^text\/html/);
    expect(page.text).toContain('<label for="search">Search</label>');
    const id = (await open.queues.enqueue('held', REPORT, ['f'], { deduplicationId: 'fast' })).workflowId;
    const { body } = await request(server).get('/queues/api/workflows?search=fast').expect(200);
    expect(body.workflows.map((w: { workflowId: string }) => w.workflowId)).toEqual([id]);
    const cancelled = await request(server)
      .post(`/queues/api/workflows/${id}/cancel`)
      .set('content-type', 'application/json')
      .send({})
      .expect(200);
    expect(cancelled.body).toEqual({ workflowId: id, status: 'CANCELLED' });
    const taker = await open.queues.enqueue('held', REPORT, ['f2'], { deduplicationId: 'fast' });
    const conflict = await request(server)
      .post(`/queues/api/workflows/${id}/resume`)
      .set('content-type', 'application/json')
      .send({})
      .expect(409);
    expect(conflict.body).toMatchObject({ statusCode: 409, existingWorkflowId: taker.workflowId });
    expect((await request(server).get('/queues/api/workflows/nope').expect(404)).body.error).toBe('Not Found');
    await request(server)
      .post(`/queues/api/workflows/${id}/reschedule`)
      .set('content-type', 'application/json')
      .send('{"x": ')
      .expect(400);

    await request(guarded.app.getHttpServer()).get('/guarded').expect(403);
    await request(guarded.app.getHttpServer()).get('/guarded/api/queues').expect(403);
  });
});
