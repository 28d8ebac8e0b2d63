/**
 * The dashboard's "Cancel all matching" / "Resume all matching": its API (`POST <path>/api/workflows/cancel-matching`
 * and `resume-matching`, a `cancelMany` / `resumeMany` filter as the body) and the page's buttons on a queue's page.
 */
import type { INestApplication } from '@nestjs/common';
import type { QueueService } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import request from 'supertest';
import { DashboardApp, startDashboardApp } from './fixtures/dashboard-app';
import { dropSchema, testPool, uniqueSchema } from './support/database';

const schema = uniqueSchema('dash_bulk');
let pool: Pool;
let started: DashboardApp;
let app: INestApplication;
let queues: QueueService;

beforeAll(async () => {
  pool = testPool();
  started = await startDashboardApp(schema);
  ({ app, queues } = started);
});

afterAll(async () => {
  await app?.close();
  await dropSchema(pool, schema);
  await pool.end();
});

const post = (path: string, body: unknown) =>
  request(app.getHttpServer())
    .post(`/queues/api${path}`)
    .set({ 'content-type': 'application/json' })
    .send(body as object);

it('cancels and resumes every workflow the filter matches, one result per workflow; an empty filter is a 400', async () => {
  const ids = [];
  for (const n of [1, 2, 3]) {
    ids.push((await queues.enqueue('held', 'DashboardTasks.report', [`bulk-${n}`], { delayMs: 3_600_000 })).workflowId);
  }
  const cancelled = await post('/workflows/cancel-matching', { queueName: 'held', status: 'DELAYED' }).expect(200);
  expect(cancelled.body.results).toHaveLength(3);
  expect(new Set(cancelled.body.results.map((result: { workflowId: string }) => result.workflowId))).toEqual(
    new Set(ids),
  );
  expect(cancelled.body.results.every((result: { outcome: string }) => result.outcome === 'cancelled')).toBe(true);

  const resumed = await post('/workflows/resume-matching', { workflowIds: ids }).expect(200);
  expect(resumed.body.results.map((result: { outcome: string }) => result.outcome)).toEqual([
    'resumed',
    'resumed',
    'resumed',
  ]);
  const { rows } = await pool.query(`SELECT DISTINCT status FROM "${schema}".workflows WHERE workflow_id = ANY($1)`, [
    ids,
  ]);
  expect(rows).toEqual([{ status: 'ENQUEUED' }]);

  const empty = await post('/workflows/cancel-matching', {}).expect(400);
  expect(empty.body).toMatchObject({ statusCode: 400, field: 'filter' });
  await queues.cancelMany({ workflowIds: ids });
});

it('the queue page has the "Cancel all matching" and "Resume all matching" buttons', async () => {
  const page = await request(app.getHttpServer()).get('/queues').expect(200);
  const text = page.text;
  expect(text).toContain("bulkButton('Cancel all matching', 'cancel-matching'");
  expect(text).toContain("bulkButton('Resume all matching', 'resume-matching'");
});
