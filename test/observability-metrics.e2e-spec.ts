import type { INestApplication } from '@nestjs/common';
import { QueueService } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import request from 'supertest';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { startDemoApp } from './support/demo-app';
import { waitFor } from './support/wait-for';

/** The value of one sample in a Prometheus text exposition, e.g. `dedup_queue_workflows{queue="q",status="SUCCESS"}`. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  const wanted = Object.entries(labels).map(([key, value]) => `${key}="${value}"`);
  for (const line of text.split('\n')) {
    const match = /^([a-z_]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const have = match[2] ? match[2].split(',') : [];
    if (wanted.length === have.length && wanted.every((label) => have.includes(label))) return Number(match[3]);
  }
  return undefined;
}

describe('metrics: GET /metrics of the demo app', () => {
  const schema = uniqueSchema('metrics');
  let app: INestApplication;
  let pool: Pool;

  beforeAll(async () => {
    pool = testPool();
    app = await startDemoApp(schema, 150);
  });

  afterAll(async () => {
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('gives exact counts per status, deduplications and histogram counts after a known workload', async () => {
    const server = app.getHttpServer();
    const statusOf = async (id: string) => (await request(server).get(`/workflows/${id}`).expect(200)).body.status;
    const first = await request(server).post('/process/u1').expect(201);
    await request(server).post('/process/u1').expect(409);
    await request(server).post('/process/u1/join').expect(202);
    const second = await request(server).post('/process/u2').expect(201);
    for (const { body } of [first, second]) {
      await waitFor(async () => (await statusOf(body.workflow_id)) === 'SUCCESS', {
        what: `${body.workflow_id} to succeed`,
      });
    }
    const queues = app.get(QueueService);
    await queues.pauseQueue('user_tasks');
    await request(server).post('/process/u3').expect(201);
    await request(server).post('/process/u4').expect(201);
    const waiting = await pool.query(
      `SELECT extract(epoch FROM now() - min(created_at))::float8 AS age FROM "${schema}".workflows WHERE status = 'ENQUEUED'`,
    );

    const scraped = await request(server).get('/metrics').expect(200);
    expect(scraped.headers['content-type']).toMatch(/^text\/plain/);
    const text = scraped.text;
    const queue = { queue: 'user_tasks' };
    const counts = Object.fromEntries(
      ['ENQUEUED', 'PENDING', 'WAITING', 'SUCCESS', 'ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'].map(
        (status) => [status, sample(text, 'dedup_queue_workflows', { ...queue, status })],
      ),
    );
    expect(counts).toEqual({
      ENQUEUED: 2,
      PENDING: 0,
      WAITING: 0,
      SUCCESS: 2,
      ERROR: 0,
      CANCELLED: 0,
      MAX_RECOVERY_ATTEMPTS_EXCEEDED: 0,
    });
    expect(sample(text, 'dedup_queue_enqueued_total', queue)).toBe(4);
    expect(sample(text, 'dedup_queue_deduplicated_total', { ...queue, outcome: 'rejected' })).toBe(1);
    expect(sample(text, 'dedup_queue_deduplicated_total', { ...queue, outcome: 'returned-existing' })).toBe(1);
    expect(sample(text, 'dedup_queue_deduplicated_total', { ...queue, outcome: 'replaced' })).toBe(0);
    expect(sample(text, 'dedup_queue_finished_total', { ...queue, status: 'SUCCESS' })).toBe(2);
    expect(sample(text, 'dedup_queue_finished_total', { ...queue, status: 'ERROR' })).toBe(0);
    expect(sample(text, 'dedup_queue_wait_seconds_count', queue)).toBe(2);
    expect(sample(text, 'dedup_queue_wait_seconds_bucket', { ...queue, le: '+Inf' })).toBe(2);
    expect(sample(text, 'dedup_queue_run_duration_seconds_count', queue)).toBe(2);
    // Each run sleeps DEMO_TASK_MS (150 ms) and publishes its progress five times (setEvent: two statements each, slow
    // on a loaded machine: over 1 s was seen at a load average of 18): both durations fall between the 0.1 and the
    // 10 s buckets.
    expect(sample(text, 'dedup_queue_run_duration_seconds_bucket', { ...queue, le: '0.1' })).toBe(0);
    expect(sample(text, 'dedup_queue_run_duration_seconds_bucket', { ...queue, le: '10' })).toBe(2);
    // NOTE: a Node timer may fire up to 1 ms early by performance.now() (it counts from the loop's cached time), so
    // a 150 ms sleep can measure 149.95 ms.
    expect(sample(text, 'dedup_queue_run_duration_seconds_sum', queue)).toBeGreaterThanOrEqual(0.298);
    const oldest = sample(text, 'dedup_queue_oldest_enqueued_age_seconds', queue) as number;
    expect(oldest).toBeGreaterThanOrEqual(waiting.rows[0].age);
    expect(oldest).toBeLessThan(waiting.rows[0].age + 5);
    expect(text).not.toContain(first.body.workflow_id);
    expect(text).not.toMatch(/u[1-4]"/);
  });

  it('answers GET /health with the queue up: database, lease and workers', async () => {
    const { body } = await request(app.getHttpServer()).get('/health').expect(200);
    expect(body.status).toBe('ok');
    expect(body.info.dedup_queue).toEqual({
      status: 'up',
      database: { status: 'up', responseMs: expect.any(Number) },
      lease: { status: 'up', executorId: expect.any(String), lastHeartbeatAt: expect.any(String) },
      workers: { status: 'up', queues: ['user_tasks', 'answers'], abandonedRuns: 0 },
      versions: { status: 'up', strandedRuns: [], checkedAt: expect.any(String) },
    });
  });
});
