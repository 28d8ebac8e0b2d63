#!/usr/bin/env node
'use strict';
/*
 * What the dashboard's reads cost on 1,000,000 finished workflows, on 1.0's layout (the module's DashboardStore and
 * WorkflowStore statements, with the history's list indexes) and on candidate C's (a workflow ID B-tree and BRINs
 * only): `node bench/storage/study/dashboard.js` (DASHBOARD_ROWS, default 1,000,000). On a server of the study's own.
 * Each read: one warm-up, then the median of 5. Lists on C read time windows newest first (the BRIN on created_at
 * skips the older block ranges) and widen the window until the page is full: 1 minute, 10 minutes, 1 hour, 6 hours,
 * a day, everything. `DASHBOARD_LAYOUTS=1.1,1.2 DASHBOARD_BEFORE_DIST=<a copy of 1.1's dist>`: issue 32 step 1, the
 * history by ID only (this build's store, in windows of creation time) against 1.1's store with its list indexes, on the
 * same rows.
 */
const path = require('node:path');
const { Pool } = require('pg');
const { startStudyServer } = require('./server');
const { UUIDV7_SQL } = require('./uuidv7');
const { libraryCandidate } = require('./candidates/library');
const writtenOnce = require('./candidates/written-once');
const { LIBRARY_DIST } = require('../../lib/config');
const { withDatabase } = require('../../lib/pg');
const { median } = require('../../lib/stats');

const ROWS = Number(process.env.DASHBOARD_ROWS ?? 1_000_000);
const log = (message) => process.stderr.write(`[dashboard ${new Date().toISOString().slice(11, 19)}] ${message}\n`);
const { WORKFLOW_STATUSES: STATUSES } = require(path.join(LIBRARY_DIST, 'interfaces', 'workflow-status.interface.js'));
const WINDOWS = ['1 minute', '10 minutes', '1 hour', '6 hours', '1 day', null];

/** The seeded workflows: two queues, ten workflow names, one in 1,000 ERROR, one in 997 CANCELLED, over 20 hours. */
const SEED_ROWS = `SELECT i, CASE WHEN i % 2 = 0 THEN 'q1' ELSE 'q2' END AS queue_name, 'Tasks.n' || (i % 10) AS workflow_name,
    CASE WHEN i % 1000 = 0 THEN 'ERROR' WHEN i % 997 = 0 THEN 'CANCELLED' ELSE 'SUCCESS' END AS status,
    'd' || i AS deduplication_id, now() - interval '20 hours' + i * (interval '20 hours' / $1::int) AS t
  FROM generate_series(1, $1::int) AS i`;

async function timed(run) {
  await run();
  const times = [];
  for (let i = 0; i < 5; i++) {
    const started = performance.now();
    await run();
    times.push(performance.now() - started);
  }
  return median(times);
}

/** The history's list indexes of 1.0 and 1.1 (migration 013), which migration 023 drops. */
const LIST_INDEXES_SQL = `
  CREATE INDEX workflow_history_created_at_btree ON dedup_queue.workflow_history (created_at) WHERE status <> 'PENDING';
  CREATE INDEX workflow_history_by_queue_status ON dedup_queue.workflow_history (queue_name, status, created_at, seq)
    INCLUDE (not_before) WHERE status <> 'PENDING';
  CREATE INDEX workflow_history_by_workflow_name ON dedup_queue.workflow_history (workflow_name, status, created_at, seq)
    INCLUDE (not_before) WHERE status <> 'PENDING';
  CREATE INDEX workflow_history_by_deduplication_id ON dedup_queue.workflow_history (deduplication_id, created_at, seq)
    WHERE deduplication_id IS NOT NULL AND status <> 'PENDING';
  CREATE INDEX workflow_history_by_partition_key ON dedup_queue.workflow_history (partition_key, created_at, seq)
    WHERE partition_key IS NOT NULL AND status <> 'PENDING';
  CREATE INDEX workflow_history_started_at ON dedup_queue.workflow_history (queue_name, started_at)
    WHERE started_at IS NOT NULL`;

/**
 * This build's layout (1.2: the history by ID only) with its `DashboardStore`; with `before`, the same rows with
 * 1.1's list indexes re-created and the `DashboardStore` of the build at DASHBOARD_BEFORE_DIST (1.1's).
 */
async function layoutHistoryById(pool, url, before) {
  const reads = await layout10(pool, url, before ? process.env.DASHBOARD_BEFORE_DIST : LIBRARY_DIST);
  if (before) {
    await pool.query(LIST_INDEXES_SQL);
    await pool.query('VACUUM ANALYZE dedup_queue.workflow_history');
  }
  return reads;
}

async function layout10(pool, url, dist = LIBRARY_DIST) {
  await libraryCandidate('1.0').install({ url, query: (sql, params) => pool.query(sql, params) }, 0);
  await pool.query(`INSERT INTO dedup_queue.queues (queue_name) VALUES ('q1'), ('q2') ON CONFLICT DO NOTHING`);
  await pool.query(
    `INSERT INTO dedup_queue.workflow_history (workflow_id, seq, queue_name, workflow_name, status, deduplication_id,
       inputs, executor_id, attempts, created_at, started_at, completed_at, updated_at)
     SELECT gen_random_uuid()::text, nextval('dedup_queue.workflow_queue_seq_seq'), queue_name, workflow_name, status,
            deduplication_id, '[{}]', 'seed', 1, t, t, t + interval '1 second', t + interval '1 second'
     FROM (${SEED_ROWS}) AS s`,
    [ROWS],
  );
  await pool.query('VACUUM ANALYZE dedup_queue.workflow_history');
  const database = {
    schemaSql: '"dedup_queue"',
    schema: 'dedup_queue',
    citus: false,
    query: async (sql, params) => (await pool.query(sql, params)).rows,
  };
  const { DashboardStore } = require(path.join(dist, 'dashboard', 'dashboard.store.js'));
  const store = new DashboardStore(database);
  const [{ id }] = (
    await pool.query(`SELECT workflow_id AS id FROM dedup_queue.workflow_history OFFSET $1 LIMIT 1`, [ROWS / 2])
  ).rows;
  return {
    byId: () => store.findDetail(id),
    newest: () => store.list({}, undefined, 50, STATUSES),
    errorsOfQueue: () => store.list({ queueName: 'q1', statuses: ['ERROR'] }, undefined, 50, STATUSES),
    byName: () => store.list({ workflowName: 'Tasks.n3' }, undefined, 50, STATUSES),
    search: () => store.list({ search: `d${ROWS / 2 + 1}` }, undefined, 50, STATUSES),
    searchIndexed: async () => {
      await pool.query(`CREATE INDEX IF NOT EXISTS workflow_history_by_deduplication_id
        ON dedup_queue.workflow_history (deduplication_id) WHERE deduplication_id IS NOT NULL`);
      return store.list({ search: `d${ROWS / 2 + 1}` }, undefined, 50, STATUSES);
    },
    counts: () => store.statusCounts(['q1', 'q2'], ['SUCCESS', 'ERROR', 'CANCELLED'], 1_000),
    listCount: () => store.count({ queueName: 'q1', statuses: ['ERROR'] }, 10_000, STATUSES),
    recent: () => store.finishedRecently(),
  };
}

async function layoutC(pool) {
  await pool.query(UUIDV7_SQL);
  await pool.query(writtenOnce.ddl);
  await pool.query('CREATE INDEX workflow_outcomes_created_at ON s.workflow_outcomes USING brin (created_at)');
  await pool.query(
    `WITH seeds AS (SELECT *, uuidv7_at(t) AS id FROM (${SEED_ROWS}) AS s),
     stored AS (
       INSERT INTO s.workflow_inputs (queue_name, workflow_id, created_at, workflow_name, deduplication_id, inputs)
       SELECT queue_name, id, t, workflow_name, deduplication_id, '[{}]' FROM seeds
     )
     INSERT INTO s.workflow_outcomes (queue_name, workflow_id, created_at, workflow_name, status, executor_id, attempts,
                                      failed_attempts, recovery_attempts, started_at, completed_at)
     SELECT queue_name, id, t, workflow_name, status, 'seed', 1, 0, 0, t, t + interval '1 second' FROM seeds`,
    [ROWS],
  );
  await pool.query('VACUUM ANALYZE');
  const [{ id }] = (await pool.query(`SELECT workflow_id AS id FROM s.workflow_inputs OFFSET $1 LIMIT 1`, [ROWS / 2]))
    .rows;
  const q = async (sql, params) => (await pool.query(sql, params)).rows;
  /** Newest first within widening windows of `column`, until `limit` rows (the dashboard's page) are found. */
  const windowed = async (sqlFor, params, limit = 50) => {
    for (const window of WINDOWS) {
      const rows = await q(sqlFor(window ? `AND t.created_at >= now() - interval '${window}'` : ''), params);
      if (rows.length >= limit || window === null) return rows;
    }
    return [];
  };
  // NOTE: a page's rows are chosen from the inputs first, then their outcome or state is probed by ID (LATERAL): a
  // join before the LIMIT would read every outcome.
  const statusOf = `LEFT JOIN LATERAL (SELECT status, completed_at, output, error FROM s.workflow_outcomes AS o
      WHERE o.queue_name = t.queue_name AND o.workflow_id = t.workflow_id AND o.created_at = t.created_at) AS o ON true
    LEFT JOIN LATERAL (SELECT status FROM s.workflow_state AS st
      WHERE st.queue_name = t.queue_name AND st.workflow_id = t.workflow_id) AS st ON true`;
  const COLUMNS = `t.workflow_id, t.queue_name, t.workflow_name, coalesce(o.status, st.status) AS status, t.deduplication_id,
    t.created_at, o.completed_at`;
  const page = (where, limit = 50) => `SELECT ${COLUMNS} FROM (
      SELECT queue_name, workflow_id, workflow_name, deduplication_id, created_at FROM s.workflow_inputs AS t
      WHERE ${where} ORDER BY created_at DESC LIMIT ${limit}
    ) AS t ${statusOf} ORDER BY t.created_at DESC`;
  return {
    byId: () =>
      q(
        `SELECT ${COLUMNS}, t.inputs, o.output, o.error FROM s.workflow_inputs AS t ${statusOf} WHERE t.workflow_id = $1`,
        [id],
      ),
    newest: () => windowed((w) => page(`true ${w}`), []),
    errorsOfQueue: () =>
      windowed(
        (w) => `SELECT t.workflow_id, t.queue_name, t.workflow_name, t.status, t.created_at, t.completed_at
                FROM s.workflow_outcomes AS t WHERE t.queue_name = $1 AND t.status = $2 ${w}
                ORDER BY t.created_at DESC LIMIT 50`,
        ['q1', 'ERROR'],
      ),
    byName: () => windowed((w) => page(`t.workflow_name = $1 ${w}`), ['Tasks.n3']),
    search: () => q(page('t.workflow_id = $1 OR t.deduplication_id = $1'), [`d${ROWS / 2 + 1}`]),
    // NOTE: without a (queue, status) index a capped count of a rare status reads everything; one pass counts all.
    counts: () =>
      q(`SELECT queue_name, status, count(*)::int AS count FROM s.workflow_outcomes GROUP BY queue_name, status`),
    recent: () =>
      q(`SELECT queue_name, count(*) FILTER (WHERE completed_at > now() - interval '1 minute')::int AS last_minute,
                count(*)::int AS last_5_minutes
         FROM s.workflow_outcomes WHERE completed_at > now() - interval '5 minutes' GROUP BY queue_name`),
  };
}

const LABELS = {
  byId: 'one workflow by ID (details)',
  newest: 'newest 50, no filter',
  errorsOfQueue: 'newest 50 ERROR of a queue (1 in 1,000)',
  byName: 'newest 50 of a workflow name (1 in 10)',
  search: 'search by deduplication ID',
  searchIndexed: 'search by deduplication ID, with the opt-in index (1.2)',
  counts: 'status counts (1.0: capped at 10,000, 1.1/1.2: at 1,000, per queue and status; C: one pass)',
  listCount: "a list's total, ERROR of a queue (capped at 10,000)",
  recent: 'finished in the last minute / 5 minutes',
};

(async () => {
  const server = await startStudyServer();
  const admin = new Pool({ connectionString: server.url, max: 1 });
  admin.on('error', () => {});
  const results = {};
  try {
    const layouts = [
      ['1.0', layout10],
      ['C', layoutC],
      ['1.1', (pool, url) => layoutHistoryById(pool, url, true)],
      ['1.2', (pool, url) => layoutHistoryById(pool, url, false)],
    ].filter(([name]) => (process.env.DASHBOARD_LAYOUTS ?? '1.0,C').split(',').includes(name));
    for (const [name, build] of layouts) {
      const database = `dashboard_${name.replace(/\W/g, '').toLowerCase()}`;
      await admin.query(`CREATE DATABASE ${database}`);
      const url = withDatabase(server.url, database);
      const pool = new Pool({ connectionString: url, max: 2 });
      pool.on('error', () => {});
      log(`${name}: ${ROWS.toLocaleString('en-US')} finished workflows ...`);
      const reads = await build(pool, url);
      const [{ size }] = (
        await pool.query(
          `SELECT pg_size_pretty(sum(pg_total_relation_size(c.oid))) AS size FROM pg_class AS c
           JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname IN ('dedup_queue', 's') AND c.relkind = 'r'`,
        )
      ).rows;
      results[name] = { size };
      for (const [read, run] of Object.entries(reads)) {
        results[name][read] = await timed(run);
        log(`${name} ${read}: ${results[name][read].toFixed(1)} ms`);
      }
      await pool.end();
    }
  } finally {
    await admin.end();
    await server.dispose();
  }
  console.log(`\n${ROWS.toLocaleString('en-US')} finished workflows; median of 5 (ms), one warm-up before:\n`);
  const names = Object.keys(results);
  console.log(`| read | ${names.join(' | ')} |`);
  console.log(`|---|${names.map(() => '---:').join('|')}|`);
  for (const [read, label] of Object.entries(LABELS)) {
    const cells = names.map((name) => (results[name][read] === undefined ? '' : results[name][read].toFixed(1)));
    console.log(`| ${label} | ${cells.join(' | ')} |`);
  }
  console.log(`| size on disk (tables and indexes) | ${names.map((name) => results[name].size).join(' | ')} |`);
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
