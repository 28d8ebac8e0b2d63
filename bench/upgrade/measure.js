'use strict';
/*
 * npm run bench -- --upgrade (or node bench/upgrade/measure.js): how long upgrading a database of the previous
 * release in place takes, which is how long its active queue cannot be claimed. Migration 013 runs in one
 * transaction that renames the old `workflows` table first (ACCESS EXCLUSIVE until it commits), so no process can
 * claim, enqueue or read a workflow for the whole migration; and no process of the new release starts before it
 * has committed.
 *
 * 1. Builds the previous release (0.2.0, commit 53ce303) from git into test/.previous-release/ (cached; as the upgrade
 *    test does) and migrates schema `bench_upgrade` (dropped first) with ITS runMigrations (`nest-dedup-queue/testing`).
 * 2. Fills it, with SQL, as that release's tables hold them: UPGRADE_ROWS (1,000,000) finished workflows over the last
 *    7 days (90% SUCCESS with a result, 7% ERROR with an error, 3% CANCELLED; half with a deduplication ID) with one
 *    step each, plus the active work the migration moves: UPGRADE_QUEUED (10,000) ENQUEUED, 100 PENDING, and 1,000
 *    finished workflows whose deduplication window is still open. VACUUM ANALYZE, as a live table would be.
 * 3. With UPGRADE_BREAKDOWN=1, first runs migration 013's statements one by one in a transaction that is rolled
 *    back, timing each (where the time goes), then CHECKPOINTs. Off by default, so that the timed run follows the
 *    seed alone (the rolled-back pass leaves dirty pages, WAL and aborted row versions behind).
 * 4. Times the NEW release's runMigrations (the repository's build, `nest-dedup-queue/testing`), while a second
 *    connection reads the queue 100 ms into it (`SELECT count(*) ... WHERE status = 'ENQUEUED'`): how long it waits.
 * Prints a table, writes bench/results/upgrade-<time>.json and upgrade-latest.md. Needs `npm run build` first and
 * PostgreSQL at BENCH_DATABASE_URL / DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres).
 * UPGRADE_KEEP=1 keeps the schema afterwards.
 */
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const REPO_DIR = path.resolve(__dirname, '..', '..');
const RESULTS_DIR = path.join(REPO_DIR, 'bench', 'results');
const LIBRARY_DIST = path.join(REPO_DIR, 'packages', 'nest-dedup-queue', 'dist');
const url = process.env.BENCH_DATABASE_URL || process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const schema = process.env.UPGRADE_SCHEMA || 'bench_upgrade';
const count = (name, fallback) => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a non-negative integer`);
  return value;
};
const finished = count('UPGRADE_ROWS', 1_000_000);
const queued = count('UPGRADE_QUEUED', 10_000);
const running = 100;
const windowed = 1_000;
const PROBE_AFTER_MS = 100;

const log = (message) => process.stderr.write(`[upgrade ${new Date().toISOString().slice(11, 19)}] ${message}\n`);
const seconds = (ms) => `${(ms / 1000).toFixed(2)} s`;

async function main() {
  if (!fs.existsSync(path.join(LIBRARY_DIST, 'testing.js'))) {
    throw new Error('nest-dedup-queue is not built: run `npm run build` at the repository root first');
  }
  // The helper the upgrade test uses, in TypeScript: loaded through the suites' own require hook.
  require(path.join(REPO_DIR, 'test', 'support', 'swc-register.js'));
  const { PREVIOUS_RELEASE, buildPreviousRelease } = require(path.join(REPO_DIR, 'test/support/previous-release.ts'));
  log(`building nest-dedup-queue ${PREVIOUS_RELEASE.version} (${PREVIOUS_RELEASE.commit}) from git (cached) ...`);
  const previous = require(path.join(buildPreviousRelease(), 'dist', 'testing.js'));
  const current = require(path.join(LIBRARY_DIST, 'testing.js'));
  const { DataSource } = require('typeorm');
  const { Pool } = require('pg');

  const dataSource = await new DataSource({ type: 'postgres', url }).initialize();
  const pool = new Pool({ connectionString: url, max: 2 });
  pool.on('error', () => undefined);
  const result = {
    startedAt: new Date().toISOString(),
    from: `${PREVIOUS_RELEASE.version} (${PREVIOUS_RELEASE.commit})`,
    postgres: (await pool.query('SHOW server_version')).rows[0].server_version,
    sharedBuffers: (await pool.query('SHOW shared_buffers')).rows[0].shared_buffers,
    rows: { finished, steps: finished, queued, running, windowed },
  };
  try {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    const oldVersions = await previous.runMigrations(
      new previous.QueueDatabase(dataSource, schema, false),
      previous.MIGRATIONS,
    );
    log(`schema "${schema}" migrated by ${PREVIOUS_RELEASE.version} to ${Math.max(...oldVersions)}`);

    let started = Date.now();
    await seed(pool);
    result.seedMs = Date.now() - started;
    result.before = await sizes(pool, ['workflows', 'steps']);
    log(`seeded in ${seconds(result.seedMs)}: ${JSON.stringify(result.before)}`);

    const migration = current.MIGRATIONS.find((m) => !previous.MIGRATIONS.some((old) => old.version === m.version));
    result.breakdownFirst = process.env.UPGRADE_BREAKDOWN === '1';
    if (result.breakdownFirst) {
      result.breakdown = await breakdown(pool, migration.up(`"${schema}"`));
      log('breakdown (rolled back):');
      for (const step of result.breakdown) log(`  ${String(step.ms).padStart(7)} ms  ${step.statement}`);
      await pool.query('CHECKPOINT');
    }

    result.loadAverage = Number(os.loadavg()[0].toFixed(2));
    const probe = probeQueue(pool, PROBE_AFTER_MS);
    started = Date.now();
    const applied = await current.runMigrations(
      new current.QueueDatabase(dataSource, schema, false),
      current.MIGRATIONS,
    );
    result.migrationMs = Date.now() - started;
    result.applied = applied;
    result.probe = await probe;
    result.after = await sizes(pool, ['workflow_queue', 'workflow_history', 'steps']);
    log(
      `runMigrations of the new release applied ${applied.join(', ')} in ${seconds(result.migrationMs)}; a read of ` +
        `the queue issued ${PROBE_AFTER_MS} ms in waited ${seconds(result.probe.waitedMs)}`,
    );
  } finally {
    if (process.env.UPGRADE_KEEP !== '1') await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
    await dataSource.destroy();
  }

  fs.mkdirSync(RESULTS_DIR, { recursive: true });
  const stamp = result.startedAt.replace(/[:.]/g, '-');
  fs.writeFileSync(path.join(RESULTS_DIR, `upgrade-${stamp}.json`), `${JSON.stringify(result, null, 2)}\n`);
  fs.writeFileSync(path.join(RESULTS_DIR, 'upgrade-latest.md'), table(result));
  console.log(table(result));
  return result;
}

/** The previous release's tables, filled as its processes would have left them. */
async function seed(pool) {
  const table = `"${schema}".workflows`;
  await pool.query(
    `INSERT INTO ${table} (workflow_id, queue_name, workflow_name, status, deduplication_id, inputs, output, error,
                          executor_id, attempts, created_at, started_at, completed_at, updated_at)
     SELECT 'wf-' || i, (ARRAY['emails', 'reports', 'billing', 'imports'])[1 + i % 4], 'Tasks.run', s.status,
            CASE WHEN i % 2 = 0 THEN 'key-' || i END,
            json_build_array('user-' || (i % 50000), json_build_object('n', i)),
            CASE WHEN s.status = 'SUCCESS' THEN json_build_object('ok', true, 'n', i) END,
            CASE WHEN s.status = 'ERROR' THEN json_build_object('name', 'Error', 'message', 'boom ' || i,
                                                                'stack', 'Error: boom\n    at work (tasks.js:1:1)') END,
            'executor-' || (i % 4), 1, t.created_at, t.created_at + interval '1 second',
            t.created_at + interval '2 seconds', t.created_at + interval '2 seconds'
     FROM generate_series(1, $1::int) AS i
     CROSS JOIN LATERAL (SELECT CASE WHEN i % 100 < 90 THEN 'SUCCESS' WHEN i % 100 < 97 THEN 'ERROR'
                                     ELSE 'CANCELLED' END AS status) AS s
     CROSS JOIN LATERAL (SELECT now() - interval '7 days' + (i::float8 / $1) * interval '7 days' AS created_at) AS t`,
    [finished],
  );
  await pool.query(
    `INSERT INTO "${schema}".steps (workflow_id, step_index, step_name, output, started_at, completed_at)
     SELECT workflow_id, 0, 'load', json_build_object('step', 0), started_at, started_at + interval '100 ms'
     FROM ${table}`,
  );
  // The active work: queued with a held key, running under an executor, finished within an open window.
  await pool.query(
    `INSERT INTO ${table} (workflow_id, queue_name, workflow_name, status, deduplication_id, active_deduplication_id,
                          inputs, executor_id, attempts, started_at)
     SELECT 'active-' || i, 'emails', 'Tasks.run', CASE WHEN i <= $2 THEN 'PENDING' ELSE 'ENQUEUED' END,
            'active-' || i, 'active-' || i, '[]', CASE WHEN i <= $2 THEN 'executor-0' END, (i <= $2)::int,
            CASE WHEN i <= $2 THEN now() END
     FROM generate_series(1, $1::int) AS i`,
    [queued + running, running],
  );
  await pool.query(
    `INSERT INTO ${table} (workflow_id, queue_name, workflow_name, status, deduplication_id, active_deduplication_id,
                          dedup_window_ms, dedup_expires_at, inputs, output, attempts, started_at, completed_at)
     SELECT 'window-' || i, 'webhooks', 'Tasks.run', 'SUCCESS', 'window-' || i, 'window-' || i, 3600000,
            now() + interval '1 hour', '[]', '"ok"', 1, now(), now()
     FROM generate_series(1, $1::int) AS i`,
    [windowed],
  );
  await pool.query(`VACUUM ANALYZE ${table}`);
  await pool.query(`VACUUM ANALYZE "${schema}".steps`);
}

/** Each statement of the migration, timed, in a transaction that is rolled back. */
async function breakdown(pool, sql) {
  const statements = sql
    .split(/;\s*\n/)
    .map((statement) => statement.trim())
    .filter(Boolean);
  const client = await pool.connect();
  const steps = [];
  try {
    await client.query('BEGIN');
    for (const statement of statements) {
      const started = process.hrtime.bigint();
      await client.query(statement);
      steps.push({
        ms: Math.round(Number(process.hrtime.bigint() - started) / 1e6),
        statement: statement.replace(/\s+/g, ' ').slice(0, 110),
      });
    }
  } finally {
    await client.query('ROLLBACK').catch(() => undefined);
    client.release();
  }
  return steps;
}

/** A read of the queue issued `afterMs` into the migration: how long it waits for the migration to commit. */
async function probeQueue(pool, afterMs) {
  await new Promise((resolve) => setTimeout(resolve, afterMs));
  const started = Date.now();
  const { rows } = await pool.query(
    `SELECT count(*)::int AS n FROM "${schema}".workflows WHERE status IN ('ENQUEUED', 'PENDING')`,
  );
  return { issuedAfterMs: afterMs, waitedMs: Date.now() - started, activeSeen: rows[0].n };
}

async function sizes(pool, tables) {
  const out = {};
  for (const name of tables) {
    const { rows } = await pool.query(
      `SELECT (SELECT count(*) FROM "${schema}"."${name}")::int AS rows,
              pg_size_pretty(coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree($1::regclass)),
                                      pg_total_relation_size($1::regclass))) AS size`,
      [`"${schema}"."${name}"`],
    );
    out[name] = `${rows[0].rows.toLocaleString('en')} rows, ${rows[0].size}`;
  }
  return out;
}

function table(r) {
  const lines = [
    `| upgrade in place from ${r.from} (${r.startedAt}) | |`,
    '|---|---|',
    `| PostgreSQL, shared_buffers; load average (${os.cpus().length} cores) | ${r.postgres}, ${r.sharedBuffers}; ${
      r.loadAverage
    } |`,
    `| before (0.2.0 tables) | ${Object.entries(r.before)
      .map(([name, size]) => `${name}: ${size}`)
      .join('; ')} |`,
    `| of which active | ${r.rows.queued} ENQUEUED, ${r.rows.running} PENDING, ${r.rows.windowed} in open windows |`,
    `| migration 013 (runMigrations of the new release) | **${seconds(r.migrationMs)}**${
      r.breakdownFirst ? ' (after the rolled-back breakdown)' : ''
    } |`,
    `| a read of the queue issued ${r.probe.issuedAfterMs} ms in waited | ${seconds(r.probe.waitedMs)} (then saw ${r.probe.activeSeen} active) |`,
    `| after | ${Object.entries(r.after)
      .map(([name, size]) => `${name}: ${size}`)
      .join('; ')} |`,
  ];
  if (r.breakdown) {
    const slowest = [...r.breakdown].sort((a, b) => b.ms - a.ms).slice(0, 6);
    lines.push(
      `| slowest statements (rolled-back run) | ${slowest.map((s) => `${s.ms} ms: ${s.statement}`).join('<br>')} |`,
    );
  }
  return `${lines.join('\n')}\n`;
}

module.exports = { main };
if (require.main === module) {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
