import { Controller, INestApplication, Module, Post } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import { DedupExceptionFilter, QueueDeduplicatedError } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import request from 'supertest';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { startDemoApp } from './support/demo-app';
import { waitFor } from './support/wait-for';

describe('demo app over HTTP', () => {
  const schema = uniqueSchema('demo');
  let app: INestApplication;
  let pool: Pool;

  beforeAll(async () => {
    pool = testPool();
    app = await startDemoApp(schema, 300);
  });

  afterAll(async () => {
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  const statusOf = async (id: string) => (await request(app.getHttpServer()).get(`/workflows/${id}`).expect(200)).body;

  it('answers 201, then 409 while the first runs, then 201 again once it finished', async () => {
    const server = app.getHttpServer();
    const first = await request(server).post('/process/u1').expect(201);
    expect(first.body).toEqual({ workflow_id: expect.any(String) });

    const duplicate = await request(server).post('/process/u1').expect(409);
    expect(duplicate.headers['content-type']).toMatch(/application\/json/);
    expect(duplicate.headers.location).toBe(`/workflows/${first.body.workflow_id}`);
    expect(duplicate.body).toEqual({
      statusCode: 409,
      error: 'Conflict',
      message: expect.stringContaining('"u1"'),
      queueName: 'user_tasks',
      deduplicationId: 'u1',
      existingWorkflowId: first.body.workflow_id,
      // Claimed at once or a moment later: the message says which.
      existingStatus: expect.stringMatching(/^(ENQUEUED|PENDING)$/),
      location: `/workflows/${first.body.workflow_id}`,
    });
    expect(duplicate.body.message).toContain(
      duplicate.body.existingStatus === 'PENDING' ? 'which is running' : 'which is queued',
    );
    const holder = await request(server).get(duplicate.headers.location).expect(200);
    expect(holder.body.progress_url).toBe(`/workflows/${first.body.workflow_id}/progress`);
    // The refused caller follows the holder's progress, published with setEvent as it works.
    const following = await request(server).get(`${holder.body.progress_url}?waitMs=5000`).expect(200);
    expect(following.body).toEqual({
      workflow_id: first.body.workflow_id,
      progress: { done: expect.any(Number), of: 4 },
    });
    const joined = await request(server).post('/process/u1/join').expect(202);
    expect(joined.body).toEqual({ workflow_id: first.body.workflow_id, created: false });
    await request(server).post('/process/u2').expect(201);

    expect((await statusOf(first.body.workflow_id)).status).toMatch(/ENQUEUED|PENDING/);
    const done = await waitFor(
      async () => {
        const body = await statusOf(first.body.workflow_id);
        return body.status === 'SUCCESS' && body;
      },
      { what: 'the first workflow to finish' },
    );
    expect(done.result).toEqual({ userId: 'u1', processedAt: expect.any(String) });
    expect(done.progress).toEqual({ done: 4, of: 4 });

    const again = await request(server).post('/process/u1/join').expect(201);
    expect(again.body.created).toBe(true);
    expect(again.body.workflow_id).not.toBe(first.body.workflow_id);
    const rows = (
      await pool.query(`SELECT status FROM "${schema}".workflows WHERE deduplication_id = 'u1' ORDER BY seq`)
    ).rows;
    expect(rows.map((row) => row.status)).toEqual(['SUCCESS', expect.stringMatching(/ENQUEUED|PENDING/)]);
  });

  it("answers 400 for a progress wait that is not a number, 404 for an unknown workflow's progress", async () => {
    const server = app.getHttpServer();
    await request(server).get('/workflows/nope/progress').expect(404);
    const first = await request(server).post('/process/u-progress').expect(201);
    await request(server).get(`/workflows/${first.body.workflow_id}/progress?waitMs=soon`).expect(400);
  });

  it('answers 404 for an unknown workflow', async () => {
    await request(app.getHttpServer()).get('/workflows/does-not-exist').expect(404);
  });

  it('serves the dashboard at /queues, open by default and behind HTTP Basic with DEMO_DASHBOARD_PASSWORD', async () => {
    const server = app.getHttpServer();
    await request(server).get('/queues').expect(200);
    const { body } = await request(server).get('/queues/api/queues').expect(200);
    expect(body.queues.map((queue: { name: string }) => queue.name)).toEqual(['user_tasks', 'answers']);
    process.env.DEMO_DASHBOARD_PASSWORD = 'demo';
    try {
      const refused = await request(server).get('/queues').expect(401);
      expect(refused.headers['www-authenticate']).toBe('Basic realm="queues"');
      await request(server).get('/queues/api/queues').auth('ops', 'wrong').expect(401);
      await request(server).get('/queues/api/queues').auth('ops', 'demo').expect(200);
    } finally {
      delete process.env.DEMO_DASHBOARD_PASSWORD;
    }
  });
});

describe('DedupExceptionFilter registration', () => {
  @Controller()
  class ThrowingController {
    @Post('conflict')
    conflict(): never {
      throw new QueueDeduplicatedError('q', 'key', 'holder-id');
    }
  }

  const expectConflict = async (app: INestApplication) => {
    const response = await request(app.getHttpServer()).post('/conflict').expect(409);
    expect(response.body).toMatchObject({
      statusCode: 409,
      queueName: 'q',
      deduplicationId: 'key',
      existingWorkflowId: 'holder-id',
    });
    await app.close();
  };

  it('is not global by surprise: without registration the error is a 500', async () => {
    @Module({ controllers: [ThrowingController] })
    class PlainModule {}
    const app = (await Test.createTestingModule({ imports: [PlainModule] }).compile()).createNestApplication({
      logger: false,
    });
    await app.init();
    await request(app.getHttpServer()).post('/conflict').expect(500);
    await app.close();
  });

  it('works as an APP_FILTER provider', async () => {
    @Module({ controllers: [ThrowingController], providers: [{ provide: APP_FILTER, useClass: DedupExceptionFilter }] })
    class FilteredModule {}
    const app = (await Test.createTestingModule({ imports: [FilteredModule] }).compile()).createNestApplication({
      logger: false,
    });
    await app.init();
    await expectConflict(app);
  });

  it('works with app.useGlobalFilters(new DedupExceptionFilter())', async () => {
    @Module({ controllers: [ThrowingController] })
    class PlainModule {}
    const app = (await Test.createTestingModule({ imports: [PlainModule] }).compile()).createNestApplication({
      logger: false,
    });
    app.useGlobalFilters(new DedupExceptionFilter());
    await app.init();
    await expectConflict(app);
  });
});
