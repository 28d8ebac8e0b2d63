/**
 * The dashboard's reads of a history indexed by workflow ID only (migration 23): newest first in windows of creation
 * time, within a read budget. On 235,000 finished workflows (one every second, newest first by `created_at`), with
 * a few queued ones among them: pages through the API are exactly the view's order, across windows and pages; a
 * filter that matches only a row older than the page's budget (200,000 rows) answers with no row, a cursor from where
 * it stopped and a total that says it is a lower bound, and the next page finds the row; with the opt-in index of
 * docs/dashboard.md the same search finds it at once, with an exact total; counts per status past their budget give
 * the planner's estimate.
 */
import type { INestApplication } from '@nestjs/common';
import type { Pool } from 'pg';
import request from 'supertest';
import { startDashboardApp } from './fixtures/dashboard-app';
import { dropSchema, testPool, uniqueSchema } from './support/database';

const ROWS = 235_000;
/**
 * The workflow only a read past the page's budget finds: older than the newest 200,000 rows and than the last window
 * that the budget lets a page finish (at most 20,000 rows).
 */
const NEEDLE_AGE_SECONDS = 225_000;

interface Page {
  workflows: Array<{ workflowId: string; status: string }>;
  total: { value: number; exact: boolean };
  nextCursor: string | null;
}

describe('dashboard: the history read in windows of creation time, within a budget', () => {
  const schema = uniqueSchema('dash_windows');
  let pool: Pool;
  let app: INestApplication;

  const list = async (query: string): Promise<Page> =>
    (await request(app.getHttpServer()).get(`/queues/api/workflows?${query}`).expect(200)).body as Page;

  beforeAll(async () => {
    pool = testPool();
    ({ app } = await startDashboardApp(schema));
    await pool.query(
      `INSERT INTO "${schema}".workflow_history (workflow_id, queue_name, workflow_name, status, deduplication_id,
                                               inputs, executor_id, attempts, created_at, started_at, completed_at)
       SELECT 'h-' || i, CASE WHEN i % 2 = 0 THEN 'work' ELSE 'held' END, 'Seeded.run',
              CASE WHEN i % 101 = 0 THEN 'ERROR' ELSE 'SUCCESS' END,
              CASE WHEN i = $2 THEN 'needle' ELSE 'key-' || i END, '[]', 'seed', 1,
              now() - i * interval '1 second', now() - i * interval '1 second', now() - i * interval '1 second'
       FROM generate_series(1, $1::int) AS i`,
      [ROWS, NEEDLE_AGE_SECONDS],
    );
    await pool.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, created_at)
       SELECT 'q-' || i, 'held', 'Seeded.run', 'ENQUEUED', '[]', now() - (i * 7.5) * interval '1 second'
       FROM generate_series(1, 40) AS i`,
    );
    await pool.query(`VACUUM ANALYZE "${schema}".workflow_history`);
    await pool.query(`ANALYZE "${schema}".workflow_queue`);
  }, 120_000);

  afterAll(async () => {
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('pages newest first exactly as the view orders them, across windows and pages', async () => {
    const expected = (
      await pool.query<{ workflow_id: string }>(
        `SELECT workflow_id FROM "${schema}".workflows WHERE queue_name = 'held'
         ORDER BY created_at DESC, seq DESC LIMIT 900`,
      )
    ).rows.map((row) => row.workflow_id);
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 3; page++) {
      const body: Page = await list(`queue=held&limit=300${cursor ? `&cursor=${cursor}` : ''}`);
      seen.push(...body.workflows.map((workflow) => workflow.workflowId));
      cursor = body.nextCursor;
    }
    expect(seen).toEqual(expected);
    expect(seen.filter((id) => id.startsWith('q-'))).toHaveLength(40);
  });

  it('stops a page at its budget with a cursor from there and a lower-bound total; the next page finds the row', async () => {
    const first = await list('deduplicationId=needle');
    expect(first.workflows).toEqual([]);
    expect(first.nextCursor).not.toBeNull();
    expect(first.total).toEqual({ value: 0, exact: false });
    const next = await list(`deduplicationId=needle&cursor=${first.nextCursor}`);
    expect(next.workflows.map((workflow) => workflow.workflowId)).toEqual([`h-${NEEDLE_AGE_SECONDS}`]);
  });

  it('reads a search through the opt-in deduplication ID index when it exists: the row at once, an exact total', async () => {
    await pool.query(
      `CREATE INDEX workflow_history_by_deduplication_id ON "${schema}".workflow_history (deduplication_id)
       WHERE deduplication_id IS NOT NULL`,
    );
    try {
      const found = await list('search=needle');
      expect(found.workflows.map((workflow) => workflow.workflowId)).toEqual([`h-${NEEDLE_AGE_SECONDS}`]);
      expect(found.total).toEqual({ value: 1, exact: true });
      expect(found.nextCursor).toBeNull();
    } finally {
      await pool.query(`DROP INDEX "${schema}".workflow_history_by_deduplication_id`);
    }
  });

  it("counts a queue's finished statuses up to their budget, then gives the planner's estimate", async () => {
    const { queues } = (await request(app.getHttpServer()).get('/queues/api/queues').expect(200)).body as {
      queues: Array<{ name: string; counts: Record<string, { value: number; exact: boolean; estimate?: number }> }>;
    };
    const held = queues.find((queue) => queue.name === 'held')!;
    expect(held.counts.ENQUEUED).toEqual({ value: 40, exact: true });
    expect(held.counts.SUCCESS).toEqual({ value: 1000, exact: false, estimate: expect.any(Number) });
    expect(held.counts.SUCCESS.estimate).toBeGreaterThan(50_000);
    expect(held.counts.ERROR.exact).toBe(false);
    expect(held.counts.ERROR.value).toBeGreaterThan(0);
    expect(held.counts.ERROR.value).toBeLessThan(1000);
  });
});
