import type { INestApplication } from '@nestjs/common';
import { QueueService } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import request from 'supertest';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { startDemoApp } from './support/demo-app';

/**
 * No row, however odd, makes a read fail: rows written by hand (or by another version) with infinite times, or an
 * error that is not `{ name, message }`, are served with stand-ins and reported in `unexpectedValues`
 * by `getStatus()`, `list()` and the dashboard's API, and the metrics still scrape; a wait without a timeout as 1.0
 * stored it (`not_before = 'infinity'`) and a `queue-next` follow-up read as `notBefore: null`, nothing unexpected.
 * The demo app (its dashboard at /queues, its metrics at /metrics).
 */
describe('odd rows', () => {
  const schema = uniqueSchema('odd_rows');
  let app: INestApplication;
  let queues: QueueService;
  let pool: Pool;

  const insert = (values: string) =>
    pool.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, not_before,
         created_at, error, active_deduplication_id, next_deduplication_id)
       VALUES ${values}`,
    );

  beforeAll(async () => {
    pool = testPool();
    app = await startDemoApp(schema, 150);
    queues = app.get(QueueService);
    await queues.pauseQueue('user_tasks');
    await insert(
      `('waits-forever', 'user_tasks', 'UserTasks.process', 'WAITING', '[]', 'infinity', now(), NULL, NULL, NULL),
       ('follow-up', 'user_tasks', 'UserTasks.process', 'ENQUEUED', '[]', 'infinity', now(), NULL, NULL, 'k'),
       ('holder', 'user_tasks', 'UserTasks.process', 'PENDING', '[]', NULL, now(), NULL, 'k', NULL),
       ('past-infinity', 'user_tasks', 'UserTasks.process', 'ENQUEUED', '[]', '-infinity', now(), NULL, NULL, NULL),
       ('created-never', 'user_tasks', 'UserTasks.process', 'WAITING', '[]', now(), 'infinity', NULL, NULL, NULL),
       ('odd-error', 'user_tasks', 'UserTasks.process', 'WAITING', '[]', now(), now(), '"boom"', NULL, NULL)`,
    );
  });

  afterAll(async () => {
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('serves getStatus() and list() with documented types, reporting what it could not read', async () => {
    const statusOf = async (id: string) => (await queues.retrieve(id)).getStatus();
    expect(await statusOf('waits-forever')).toMatchObject({ status: 'WAITING', notBefore: null });
    expect(await statusOf('follow-up')).toMatchObject({ status: 'DELAYED', notBefore: null });
    for (const id of ['waits-forever', 'follow-up', 'holder']) {
      expect((await statusOf(id)).unexpectedValues).toBeUndefined();
    }
    expect(await statusOf('past-infinity')).toMatchObject({
      notBefore: new Date(-8.64e15),
      unexpectedValues: [{ field: 'notBefore', value: '-Infinity' }],
    });
    expect(await statusOf('created-never')).toMatchObject({
      createdAt: new Date(8.64e15),
      unexpectedValues: [{ field: 'createdAt', value: 'Infinity' }],
    });
    expect(await statusOf('odd-error')).toMatchObject({
      error: null,
      unexpectedValues: [{ field: 'error', value: '"boom"' }],
    });

    const listed = await queues.list({ queueName: 'user_tasks', limit: 100 });
    expect(listed).toHaveLength(6);
    for (const status of listed) {
      for (const field of ['createdAt', 'startedAt', 'completedAt', 'notBefore'] as const) {
        const value = status[field];
        expect({ id: status.workflowId, field, ok: value === null || value instanceof Date }).toEqual({
          id: status.workflowId,
          field,
          ok: true,
        });
      }
    }
  });

  it("serves the dashboard's list, each workflow and the queues, marking the odd rows", async () => {
    const server = app.getHttpServer();
    const { body } = await request(server).get('/queues/api/workflows?queue=user_tasks').expect(200);
    expect(body.workflows).toHaveLength(6);
    const byId = new Map<string, { notBefore: string | null; unexpectedValues?: unknown[] }>(
      body.workflows.map((row: { workflowId: string }) => [row.workflowId, row]),
    );
    expect(byId.get('waits-forever')).toMatchObject({ notBefore: null });
    expect(byId.get('waits-forever')?.unexpectedValues).toBeUndefined();
    expect(byId.get('created-never')).toMatchObject({
      createdAt: new Date(8.64e15).toISOString(),
      unexpectedValues: [{ field: 'createdAt', value: 'Infinity' }],
    });
    for (const id of byId.keys()) {
      await request(server).get(`/queues/api/workflows/${id}`).expect(200);
    }
    await request(server).get('/queues/api/workflows?status=WAITING,DELAYED,ENQUEUED').expect(200);
    await request(server).get('/queues/api/queues').expect(200);
  });

  it('scrapes the metrics', async () => {
    const scraped = await request(app.getHttpServer()).get('/metrics').expect(200);
    expect(scraped.text).toMatch(/dedup_queue_oldest_enqueued_age_seconds\{queue="user_tasks"\} \d/);
  });
});
