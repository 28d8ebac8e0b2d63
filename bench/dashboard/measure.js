'use strict';
// node bench/dashboard/measure.js: every dashboard API call against 1,000,000 workflows (DASHBOARD_ROWS), timed over
// HTTP on a real Nest app. Seeds the schema `bench_dashboard` once (about a minute); DASHBOARD_RESEED=1 seeds again.
const { Pool } = require('pg');
const { startDashboardApp } = require('./app');
const { seedWorkflows } = require('./seed');

const url = process.env.BENCH_DATABASE_URL || process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const schema = process.env.DASHBOARD_SCHEMA || 'bench_dashboard';
const rows = Number(process.env.DASHBOARD_ROWS || 1_000_000);
const repetitions = Number(process.env.DASHBOARD_REPS || 15);

async function main() {
  const { app, baseUrl } = await startDashboardApp(url, schema);
  const pool = new Pool({ connectionString: url, max: 2 });
  pool.on('error', () => undefined);
  try {
    const {
      rows: [{ count }],
    } = await pool.query(`SELECT count(*)::int AS count FROM "${schema}".workflows`);
    if (count < rows || process.env.DASHBOARD_RESEED === '1') {
      const started = Date.now();
      await seedWorkflows(pool, schema, rows);
      console.log(`seeded ${rows.toLocaleString('en')} workflows in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    }
    const recent = (await fetchJson(`${baseUrl}/api/workflows?queue=emails&limit=1`)).workflows[0];
    const firstPage = await fetchJson(`${baseUrl}/api/workflows?queue=emails&status=SUCCESS`);
    const {
      rows: [withSteps],
    } = await pool.query(`SELECT workflow_id FROM "${schema}".steps ORDER BY workflow_id DESC LIMIT 1`);
    const sixDaysAgo = new Date(Date.now() - 6 * 86_400_000).toISOString();
    const calls = [
      ['GET  /api/queues (counts, limits, throughput)', '/api/queues'],
      ['GET  /api/workflows (no filter)', '/api/workflows'],
      ['GET  /api/workflows?queue', '/api/workflows?queue=emails'],
      ['GET  /api/workflows?queue&status=SUCCESS', '/api/workflows?queue=emails&status=SUCCESS'],
      [
        'GET  /api/workflows?queue&status=SUCCESS, page 2',
        `/api/workflows?queue=emails&status=SUCCESS&cursor=${firstPage.nextCursor}`,
      ],
      ['GET  /api/workflows?queue&status=ERROR,CANCELLED', '/api/workflows?queue=emails&status=ERROR,CANCELLED'],
      [
        'GET  /api/workflows?status=MAX_RECOVERY_… (all queues)',
        '/api/workflows?status=MAX_RECOVERY_ATTEMPTS_EXCEEDED',
      ],
      ['GET  /api/workflows?workflowName', '/api/workflows?workflowName=Reports.build'],
      ['GET  /api/workflows?workflowName&status=ERROR', '/api/workflows?workflowName=Reports.build&status=ERROR'],
      ['GET  /api/workflows?deduplicationId', '/api/workflows?deduplicationId=user-4242'],
      ['GET  /api/workflows?partitionKey', '/api/workflows?partitionKey=tenant-7'],
      ['GET  /api/workflows?search (workflow ID)', `/api/workflows?search=${recent.workflowId}`],
      ['GET  /api/workflows?search (deduplication ID)', '/api/workflows?search=user-4242'],
      ['GET  /api/workflows?createdTo (6 days ago)', `/api/workflows?createdTo=${sixDaysAgo}`],
      [
        'GET  /api/workflows?queue&status&createdTo',
        `/api/workflows?queue=billing&status=ERROR&createdTo=${sixDaysAgo}`,
      ],
      ['GET  /api/workflows/:id (with 3 steps)', `/api/workflows/${withSteps.workflow_id}`],
      ['GET  <path> (the page)', ''],
    ];
    const results = [];
    for (const [label, path] of calls) {
      await fetchJson(`${baseUrl}${path}`, path === '');
      const times = [];
      for (let i = 0; i < repetitions; i++) {
        const started = process.hrtime.bigint();
        await fetchJson(`${baseUrl}${path}`, path === '');
        times.push(Number(process.hrtime.bigint() - started) / 1e6);
      }
      times.sort((a, b) => a - b);
      results.push({ label, median: times[Math.floor(times.length / 2)], max: times[times.length - 1] });
    }
    const { rows: queued } = await pool.query(
      `SELECT workflow_id FROM "${schema}".workflows WHERE status = 'ENQUEUED' ORDER BY created_at DESC LIMIT 5`,
    );
    const actions = [
      ['POST /api/workflows/:id/cancel', 'cancel'],
      ['POST /api/workflows/:id/resume', 'resume'],
      ['POST /api/workflows/:id/rerun', 'rerun'],
    ];
    for (const [label, action] of actions) {
      const times = [];
      for (const { workflow_id: id } of queued) {
        const started = process.hrtime.bigint();
        await post(`${baseUrl}/api/workflows/${id}/${action}`);
        times.push(Number(process.hrtime.bigint() - started) / 1e6);
      }
      times.sort((a, b) => a - b);
      results.push({ label: `${label} (5 calls)`, median: times[2], max: times[4] });
    }
    const width = Math.max(...results.map((result) => result.label.length));
    console.log(`\n${rows.toLocaleString('en')} workflows, ${repetitions} calls each over HTTP (ms)\n`);
    console.log(`${'call'.padEnd(width)}  median     max`);
    for (const result of results) {
      console.log(
        `${result.label.padEnd(width)}  ${result.median.toFixed(1).padStart(6)}  ${result.max.toFixed(1).padStart(6)}`,
      );
    }
    const slowest = results.reduce((a, b) => (b.median > a.median ? b : a));
    console.log(`\nslowest (median): ${slowest.label}: ${slowest.median.toFixed(1)} ms`);
  } finally {
    await pool.end();
    await app.close();
  }
}

async function fetchJson(target, text = false) {
  const response = await fetch(target);
  if (!response.ok) throw new Error(`${target}: ${response.status} ${await response.text()}`);
  return text ? response.text() : response.json();
}

async function post(target) {
  const response = await fetch(target, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  if (response.status >= 500) throw new Error(`${target}: ${response.status} ${await response.text()}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
