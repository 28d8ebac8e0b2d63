/**
 * `QueueService.list()` over a history indexed by workflow ID only (migration 23): newest first by creation time, the
 * history read in windows of it. On 60,000 finished workflows (two created every 100 ms, so that ties are told apart
 * by `seq`) and 60 workflows in the active table among them (ready, delayed, dead letters; and key records of
 * finished workflows, which are not listed): for each filter, pages across window boundaries are exactly those of
 * `ORDER BY created_at DESC, seq DESC` over the `workflows` view; a frequent filter's first page reads a few windows
 * (counted by EXPLAIN ANALYZE of the statements sent), not the history; a workflow that finishes between the reads of
 * the two tables is listed once, as one snapshot shows it.
 */
import type { INestApplication } from '@nestjs/common';
import type { ListWorkflowsOptions, QueueService } from 'nest-dedup-queue';
import * as pg from 'pg';
import { startDashboardApp } from './fixtures/dashboard-app';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { historyRowsRead, populatedHistoryPartitions } from './support/history-rows-read';
import { captureStatements } from './support/statement-capture';

const ROWS = 60_000;
const ACTIVE_ROWS = 60;

/** A row of the view, as a list's filters and order see it. */
interface ViewRow {
  workflow_id: string;
  queue_name: string;
  workflow_name: string;
  deduplication_id: string | null;
  parent_workflow_id: string | null;
  status: string;
}

describe('QueueService.list(): newest first by creation time, the history read in windows', () => {
  const schema = uniqueSchema('list_windows');
  let pool: pg.Pool;
  let app: INestApplication;
  let queues: QueueService;
  let view: ViewRow[];
  const capture = captureStatements(/\.workflow(s|_queue|_history)\b/);

  beforeAll(async () => {
    pool = testPool();
    ({ app, queues } = await startDashboardApp(schema));
    await pool.query(
      `INSERT INTO "${schema}".workflow_history (workflow_id, queue_name, workflow_name, status, deduplication_id,
                                               parent_workflow_id, inputs, executor_id, attempts, created_at,
                                               started_at, completed_at)
       SELECT 'h-' || i, (ARRAY['work', 'held', 'tenants'])[1 + i % 3], 'Seeded.' || (ARRAY['a', 'b'])[1 + i % 2],
              CASE WHEN i % 101 = 0 THEN 'ERROR' WHEN i % 97 = 0 THEN 'CANCELLED' ELSE 'SUCCESS' END,
              'key-' || (i % 500), CASE WHEN i % 1000 = 0 THEN 'parent-1' END, '[]', 'seed', 1, at, at, at
       FROM generate_series(1, $1::int) AS i,
            LATERAL (SELECT now() - (i / 2) * interval '100 milliseconds' AS at) AS time`,
      [ROWS],
    );
    await pool.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, deduplication_id,
                                             parent_workflow_id, inputs, not_before, created_at)
       SELECT 'q-' || i, (ARRAY['held', 'tenants'])[1 + i % 2], 'Seeded.' || (ARRAY['a', 'b'])[1 + i % 2],
              CASE WHEN i % 5 = 0 THEN 'MAX_RECOVERY_ATTEMPTS_EXCEEDED' ELSE 'ENQUEUED' END,
              'key-' || (i % 500), CASE WHEN i % 20 = 0 THEN 'parent-1' END, '[]',
              CASE WHEN i % 3 = 0 THEN now() + interval '1 hour' END, now() - i * interval '25 seconds'
       FROM generate_series(1, $1::int) AS i`,
      [ACTIVE_ROWS],
    );
    // Key records of finished workflows whose deduplication window is open: in the active table, listed by neither.
    await pool.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, deduplication_id,
                                             active_deduplication_id, dedup_expires_at, inputs, created_at)
       SELECT 'k-' || i, 'held', 'Seeded.a', 'SUCCESS', 'kept-' || i, 'kept-' || i, now() + interval '1 day', '[]',
              now() - i * interval '1 second'
       FROM generate_series(1, 5) AS i`,
    );
    await pool.query(`VACUUM ANALYZE "${schema}".workflow_history`);
    await pool.query(`ANALYZE "${schema}".workflow_queue`);
    view = (
      await pool.query<ViewRow>(
        `SELECT workflow_id, queue_name, workflow_name, deduplication_id, parent_workflow_id,
                CASE WHEN status = 'ENQUEUED' AND not_before > now() THEN 'DELAYED' ELSE status END AS status
         FROM "${schema}".workflows ORDER BY created_at DESC, seq DESC`,
      )
    ).rows;
  }, 120_000);

  afterAll(async () => {
    capture.restore();
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  const filters: Array<[string, ListWorkflowsOptions]> = [
    ['no filter', {}],
    ['a queue', { queueName: 'held' }],
    ['a finished status', { status: 'ERROR' }],
    ['statuses of both tables', { status: ['CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'] }],
    ['not started', { status: ['ENQUEUED', 'DELAYED'] }],
    ['DELAYED', { status: 'DELAYED' }],
    ['a workflow name', { workflowName: 'Seeded.b' }],
    ['a deduplication ID', { deduplicationId: 'key-7' }],
    ['a parent', { parentWorkflowId: 'parent-1' }],
    [
      'a queue, statuses and a name',
      { queueName: 'tenants', status: ['SUCCESS', 'ENQUEUED'], workflowName: 'Seeded.a' },
    ],
  ];
  const pages: Array<[number, number]> = [
    [100, 0],
    [250, 1_900],
    [1_000, 9_500],
    [10_000, 50_000],
  ];

  it.each(filters)('%s: the rows and order of the view, page by page', async (_what, filter) => {
    const matching = view.filter(
      (row) =>
        (filter.queueName === undefined || row.queue_name === filter.queueName) &&
        (filter.workflowName === undefined || row.workflow_name === filter.workflowName) &&
        (filter.deduplicationId === undefined || row.deduplication_id === filter.deduplicationId) &&
        (filter.parentWorkflowId === undefined || row.parent_workflow_id === filter.parentWorkflowId) &&
        (filter.status === undefined || [filter.status].flat().includes(row.status as never)),
    );
    expect(matching.length).toBeGreaterThan(0);
    for (const [limit, offset] of pages) {
      const listed = await queues.list({ ...filter, limit, offset });
      expect(listed.map((workflow) => `${workflow.workflowId} ${workflow.status}`)).toEqual(
        matching.slice(offset, offset + limit).map((row) => `${row.workflow_id} ${row.status}`),
      );
    }
  });

  it("reads a few windows for a frequent filter's first page, not the history", async () => {
    const populated = await populatedHistoryPartitions(pool, schema);
    expect(populated.size).toBeGreaterThan(0);
    for (const filter of [{ queueName: 'held' }, { status: 'SUCCESS' as const, offset: 200 }, {}]) {
      capture.captured.length = 0;
      capture.capturing = true;
      try {
        expect(await queues.list({ ...filter, limit: 100 })).toHaveLength(100);
      } finally {
        capture.capturing = false;
      }
      let read = 0;
      for (const { text, values } of capture.captured) read += await historyRowsRead(pool, text, values, populated);
      expect(read).toBeGreaterThan(0);
      // NOTE: a window reads whole BRIN ranges (16 pages, about 1,000 rows here), twice (its count, its rows).
      expect(read).toBeLessThan(ROWS / 6);
    }
  });

  it('lists a workflow that finishes between the reads of the two tables once, as one snapshot shows it', async () => {
    await pool.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, created_at)
       VALUES ('moving', 'held', 'Seeded.a', 'ENQUEUED', '[]', now())`,
    );
    const columns = 'workflow_id, seq, queue_name, workflow_name, inputs, created_at';
    const original = pg.Client.prototype.query;
    let moved = false;
    // Before the first read of the history, the workflow moves there, ended, on another connection.
    pg.Client.prototype.query = function (this: pg.Client, config: unknown, ...rest: unknown[]) {
      const text = typeof config === 'string' ? config : (config as { text?: string } | undefined)?.text;
      if (!moved && text?.includes('.workflow_history')) {
        moved = true;
        return pool
          .query(
            `WITH gone AS (DELETE FROM "${schema}".workflow_queue WHERE workflow_id = 'moving' RETURNING ${columns})
             INSERT INTO "${schema}".workflow_history (${columns}, status, attempts, started_at, completed_at)
             SELECT ${columns}, 'SUCCESS', 1, now(), now() FROM gone`,
          )
          .then(() => (original as (...args: unknown[]) => unknown).call(this, config, ...rest));
      }
      return (original as (...args: unknown[]) => unknown).call(this, config, ...rest);
    } as typeof original;
    let listed: Awaited<ReturnType<QueueService['list']>>;
    try {
      listed = await queues.list({ queueName: 'held', limit: 5 });
    } finally {
      pg.Client.prototype.query = original;
    }
    expect(moved).toBe(true);
    expect(listed.filter((workflow) => workflow.workflowId === 'moving').map((workflow) => workflow.status)).toEqual([
      'ENQUEUED',
    ]);
    const after = await queues.list({ queueName: 'held', limit: 5 });
    expect(after.filter((workflow) => workflow.workflowId === 'moving').map((workflow) => workflow.status)).toEqual([
      'SUCCESS',
    ]);
  });
});
