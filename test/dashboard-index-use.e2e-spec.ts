/**
 * Every list the dashboard reads is bounded, never a scan of the workflows' history: the active table (the running,
 * queued and waiting workflows) is read whole when a list filters it by status, which no index names since migration
 * 025, and the history, which since migration 023 has no ordered
 * index but its workflow ID's, newest first in windows of creation time read through its BRIN index. Each statement the
 * API sends over HTTP is captured and EXPLAINed (and run under EXPLAIN ANALYZE, to count the history rows it reads)
 * against 60,000 analysed rows: no list statement may scan a populated table, and the lists of a request together read
 * at most two thirds of the history.
 */
import type { INestApplication } from '@nestjs/common';
import type { Pool } from 'pg';
import request from 'supertest';
import { startDashboardApp } from './fixtures/dashboard-app';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { historyRowsRead, populatedHistoryPartitions } from './support/history-rows-read';
import { captureStatements } from './support/statement-capture';

const ROWS = 60_000;
/**
 * The history rows the lists of one request may read: under the whole history (about 58,500 rows), with room for the
 * rarest filter here (a partition key, 1 row in 300: its 51 rows are among the newest 15,300).
 */
const HISTORY_LIST_BOUND = (ROWS * 2) / 3;

describe('dashboard reads are bounded (indexes, and the history in windows of creation time)', () => {
  const schema = uniqueSchema('dash_index');
  let pool: Pool;
  let app: INestApplication;
  const capture = captureStatements(/\.workflow(s|_queue|_history)\b/);

  beforeAll(async () => {
    pool = testPool();
    ({ app } = await startDashboardApp(schema));
    const seeder = await pool.connect();
    await seeder.query(
      `CREATE TEMP TABLE seed AS
       SELECT 'seed-' || i AS workflow_id, q AS queue_name, 'Seeded.run' AS workflow_name, s AS status,
              'user-' || (i % 5000) || CASE WHEN s IN ('ENQUEUED', 'PENDING') THEN '-' || i ELSE '' END
                AS deduplication_id,
              CASE WHEN s IN ('ENQUEUED', 'PENDING') THEN 'user-' || (i % 5000) || '-' || i END
                AS active_deduplication_id,
              '[]'::json AS inputs, CASE WHEN s <> 'ENQUEUED' THEN 'seed-executor' END AS executor_id,
              (s <> 'ENQUEUED')::int AS attempts, now() - (i || ' seconds')::interval AS created_at,
              CASE WHEN s <> 'ENQUEUED' THEN now() - (i || ' seconds')::interval END AS started_at,
              CASE WHEN s NOT IN ('ENQUEUED', 'PENDING') THEN now() - (i || ' seconds')::interval END AS completed_at,
              CASE WHEN q = 'tenants' THEN 'tenant-' || (i % 100) END AS partition_key
       FROM generate_series(1, $1::int) AS i
       CROSS JOIN LATERAL (SELECT (ARRAY['work', 'held', 'tenants'])[1 + i % 3] AS q,
                                  CASE WHEN i % 200 = 0 THEN 'PENDING' WHEN i % 50 = 1 THEN 'ENQUEUED'
                                       WHEN i % 25 = 2 THEN 'ERROR' WHEN i % 40 = 3 THEN 'CANCELLED'
                                       ELSE 'SUCCESS' END AS s) AS draw`,
      [ROWS],
    );
    const columns = `workflow_id, queue_name, workflow_name, status, deduplication_id, active_deduplication_id, inputs,
                     executor_id, attempts, created_at, started_at, completed_at, partition_key`;
    await seeder.query(
      `INSERT INTO "${schema}".workflow_queue (${columns})
       SELECT ${columns} FROM seed WHERE status IN ('ENQUEUED', 'PENDING')`,
    );
    await seeder.query(
      `INSERT INTO "${schema}".workflow_history (${columns})
       SELECT ${columns} FROM seed WHERE status NOT IN ('ENQUEUED', 'PENDING')`,
    );
    seeder.release();
    await pool.query(`VACUUM ANALYZE "${schema}".workflow_queue`);
    // The opt-in index of docs/dashboard.md, with which a search by deduplication ID does not read the history in windows.
    await pool.query(
      `CREATE INDEX workflow_history_by_deduplication_id ON "${schema}".workflow_history (deduplication_id)
       WHERE deduplication_id IS NOT NULL`,
    );
    // NOTE: VACUUM summarizes the BRIN ranges of the rows just written, as autovacuum (autosummarize) does in use.
    await pool.query(`VACUUM ANALYZE "${schema}".workflow_history`);
  });

  afterAll(async () => {
    capture.restore();
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  const reads: Array<[string, string]> = [
    ['counts per queue and status', '/queues/api/queues'],
    ['no filter', '/queues/api/workflows'],
    ['a queue', '/queues/api/workflows?queue=held'],
    ['a queue and a status', '/queues/api/workflows?queue=held&status=SUCCESS'],
    ['a queue and PENDING', '/queues/api/workflows?queue=held&status=PENDING'],
    ['a status in every queue', '/queues/api/workflows?status=ERROR,PENDING'],
    ['a workflow name', '/queues/api/workflows?workflowName=Seeded.run'],
    ['a workflow name and a status', '/queues/api/workflows?workflowName=Seeded.run&status=CANCELLED'],
    ['a deduplication ID', '/queues/api/workflows?deduplicationId=user-7'],
    ['a partition key', '/queues/api/workflows?partitionKey=tenant-2'],
    ['a search', '/queues/api/workflows?search=user-9'],
    [
      'a time range',
      `/queues/api/workflows?createdTo=${encodeURIComponent(new Date(Date.now() - 3_600_000).toISOString())}`,
    ],
  ];

  it.each(reads)('%s: every list walks an index and reads a bounded part of the history', async (_what, path) => {
    capture.captured.length = 0;
    capture.capturing = true;
    try {
      await request(app.getHttpServer()).get(path).expect(200);
    } finally {
      capture.capturing = false;
    }
    let listRowsRead = 0;
    const reads = capture.captured.filter(({ text }) => /^\s*(SELECT|\(SELECT)/.test(text));
    expect(reads.length).toBeGreaterThan(0);
    const populated = await populatedHistoryPartitions(pool, schema);
    expect(populated.size).toBeGreaterThan(0);
    for (const { text, values } of reads) {
      const plan = (await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${text}`, values)).rows.map(
        (row) => row['QUERY PLAN'],
      );
      // NOTE: a capped count may scan under its LIMIT when most rows match (it stops at the cap); a list may not.
      const list = text.includes('ORDER BY');
      const unbounded = plan.filter((line, at) => {
        const scanned = /Seq Scan on (\w+)/.exec(line)?.[1];
        return scanned !== undefined && populated.has(scanned) && (list || !underLimit(plan, at));
      });
      if (unbounded.length > 0) throw new Error(`a table scan for ${path}:\n${text}\n${plan.join('\n')}`);
      // NOTE: since migration 025 no index of the active table names the status (a claim would move its entry): a
      // list reads the active rows it shows by a scan of the active table (the queues' running and queued workflows),
      // and the history through its indexes.
      const readsHistory = plan.some((line) => /on workflow_history/.test(line));
      if (list && readsHistory) expect(plan.join('\n')).toMatch(/Index (Only )?Scan|Bitmap Index Scan/);
      if (list) listRowsRead += await historyRowsRead(pool, text, values, populated);
    }
    expect(listRowsRead).toBeLessThan(HISTORY_LIST_BOUND);
  });
});

/** Whether the plan node on line `at` has a Limit node above it. */
function underLimit(plan: string[], at: number): boolean {
  const depth = (line: string) => line.search(/\S/);
  let current = depth(plan[at]);
  for (let line = at - 1; line >= 0; line--) {
    if (depth(plan[line]) >= current) continue;
    if (/^\s*(->\s*)?Limit\b/.test(plan[line])) return true;
    current = depth(plan[line]);
  }
  return false;
}
