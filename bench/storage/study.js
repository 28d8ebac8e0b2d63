'use strict';
/*
 * npm run bench -- --storage (node bench/storage/study.js): the storage design study of issue 32. On a PostgreSQL
 * server of its own, for each candidate in its own database: enqueue STUDY_JOBS (20,000) workflows with a
 * deduplication key each, then drain them with one worker (32 slots), and measure each phase after a CHECKPOINT:
 *  - WAL: records, full-page images and bytes (pg_waldump of the phase's LSN range, the candidate's database only;
 *    pg_stat_wal and the LSN distance beside it), by record type, and the index entries written, per index;
 *  - database CPU: utime + stime of the candidate's client backends (/proc), per job; the client's own CPU;
 *  - jobs/s, and what pg_stat_statements says of the phase's statements.
 * Candidates (see storage/study/candidates/): the module as it is (1.0), A (1.0 with its history by ID only and
 * time-ordered IDs, the module itself), P0 (1.0's statements under the study's driver, its calibration), B (ready
 * apart, HOT claim), C (written once), and graphile-worker 0.17 driven by itself. Each history starts with
 * STUDY_SEED (100,000) finished workflows. Repetitions (STUDY_REPS, 3) rotate the candidates' order; the report
 * gives medians. WAL and index counts are deterministic; CPU and rates depend on what else the machine runs.
 * Needs `npm run build` and the Debian postgresql-15 binaries (pg_waldump, pg_stat_statements).
 */
const fs = require('node:fs');
const path = require('node:path');
const { fork } = require('node:child_process');
const { Client, Pool } = require('pg');
const { startStudyServer } = require('./study/server');
const { walSummary } = require('./study/waldump');
const { CANDIDATES, DEFAULT_CANDIDATES } = require('./study/candidates');
const { HELD } = require('./study/driver');
const { StoreCpu } = require('../lib/usage');
const { withDatabase } = require('../lib/pg');
const { median } = require('../lib/stats');
const { RESULTS_DIR } = require('../lib/config');

const int = (name, fallback) => (process.env[name] ? Number(process.env[name]) : fallback);
const JOBS = int('STUDY_JOBS', 20_000);
const SEED = int('STUDY_SEED', 100_000);
const REPS = int('STUDY_REPS', 3);
/** The size of each workflow's arguments (JSON), beyond the key they carry: 0 is the bench's no-op jobs. */
const INPUT_BYTES = int('STUDY_INPUT_BYTES', 0);
/**
 * STUDY_PLAN_CACHE_MODE=force_generic_plan: every candidate's sessions plan their prepared statements once (the
 * server's choice, `auto`, re-plans the module's outcome statement at every execution once statistics are fresh).
 */
const PLAN_CACHE_MODE = process.env.STUDY_PLAN_CACHE_MODE || '';

/** A candidate's connection string, with the study's session settings. */
function sessionUrl(url) {
  if (!PLAN_CACHE_MODE) return url;
  const u = new URL(url);
  u.searchParams.set('options', `-c plan_cache_mode=${PLAN_CACHE_MODE}`);
  return u.toString();
}
const SELECTED = process.env.STUDY_CANDIDATES ? process.env.STUDY_CANDIDATES.split(',') : DEFAULT_CANDIDATES;
const log = (message) => process.stderr.write(`[storage ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

function orchestratorPool(url) {
  const pool = new Pool({ connectionString: url, max: 2, application_name: 'bench-orchestrator' });
  pool.on('error', () => {});
  return pool;
}

/** Runs one phase in a child process; resolves when it reports done (its connections still open). */
function runChild(spec) {
  const child = fork(path.join(__dirname, 'study', 'child.js'), [JSON.stringify(spec)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    env: { ...process.env, NODE_ENV: 'production' },
  });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const done = new Promise((resolve, reject) => {
    child.on('message', (message) => {
      if (message.type === 'done') resolve(message);
      else reject(new Error(`${spec.candidate} ${spec.role}: ${message.message}`));
    });
    child.on('exit', (code) => reject(new Error(`${spec.candidate} ${spec.role} exited (${code})`)));
  });
  return {
    done,
    async close() {
      child.send({ type: 'close' });
      await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 15_000))]);
      if (child.exitCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

async function waitForBackendsToLeave(admin, database) {
  for (let i = 0; i < 200; i++) {
    const { rows } = await admin.query(
      `SELECT count(*)::int AS n FROM pg_stat_activity
       WHERE datname = $1 AND backend_type = 'client backend' AND application_name <> 'bench-orchestrator'`,
      [database],
    );
    if (rows[0].n === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`sessions of ${database} still open`);
}

/**
 * The vacuum that autovacuum would run after a drain (VACUUM of the candidate's database, on a session the study
 * counts as the store's), as a phase: what the dead rows a layout leaves cost to clean.
 */
function vacuumAll(url) {
  const client = new Client({ connectionString: url, application_name: 'study-vacuum' });
  const started = performance.now();
  const done = (async () => {
    await client.connect();
    await client.query('VACUUM');
    return { seconds: (performance.now() - started) / 1000, statements: 1, clientCpuSeconds: 0 };
  })();
  return { done, close: () => client.end() };
}

/** Measures one phase (`role`: enqueue, drain or vacuum) of one candidate. */
async function measurePhase(context, candidate, role, keyPrefix) {
  const { server, admin, databases } = context;
  const db = databases.get(candidate);
  await admin.query('CHECKPOINT');
  await admin.query('SELECT pg_stat_statements_reset()');
  const [start] = (
    await admin.query(
      `SELECT pg_current_wal_lsn()::text AS lsn, wal_records::float8 AS records, wal_fpi::float8 AS fpi,
              wal_bytes::float8 AS bytes FROM pg_stat_wal`,
    )
  ).rows;
  const storeCpu = new StoreCpu({ adminUrl: server.url, databaseUrl: db.url });
  await storeCpu.start();
  const child =
    role === 'vacuum'
      ? vacuumAll(db.url)
      : runChild({ candidate, role, url: sessionUrl(db.url), jobs: JOBS, keyPrefix, inputBytes: INPUT_BYTES });
  let done;
  let dbCpuSeconds;
  try {
    done = await child.done;
  } finally {
    dbCpuSeconds = await storeCpu.stop();
    await child.close();
  }
  await waitForBackendsToLeave(admin, db.name);
  const [end] = (
    await admin.query(
      `SELECT pg_current_wal_lsn()::text AS lsn, pg_wal_lsn_diff(pg_current_wal_lsn(), $1)::float8 AS distance,
              wal_records::float8 AS records, wal_fpi::float8 AS fpi, wal_bytes::float8 AS bytes FROM pg_stat_wal`,
      [start.lsn],
    )
  ).rows;
  const wal = await walSummary({
    binDir: server.binDir,
    dataDir: server.dataDir,
    startLsn: start.lsn,
    endLsn: end.lsn,
    databaseOid: db.oid,
  });
  const relations = new Map(
    (await db.pool.query('SELECT relfilenode::int AS node, relname FROM pg_class WHERE relfilenode <> 0')).rows.map(
      (row) => [row.node, row.relname],
    ),
  );
  const statements = (
    await admin.query(
      `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls::float8 AS calls, rows::float8 AS rows,
              (total_exec_time + total_plan_time)::float8 AS ms, total_plan_time::float8 AS plan_ms, plans::float8 AS plans,
              wal_records::float8 AS wal_records, wal_fpi::float8 AS wal_fpi, wal_bytes::float8 AS wal_bytes
       FROM pg_stat_statements WHERE dbid = $1 ORDER BY total_exec_time + total_plan_time DESC LIMIT 6`,
      [db.oid],
    )
  ).rows;
  const [totals] = (
    await admin.query(
      `SELECT coalesce(sum(total_plan_time), 0)::float8 AS plan_ms, coalesce(sum(total_exec_time), 0)::float8 AS exec_ms
       FROM pg_stat_statements WHERE dbid = $1`,
      [db.oid],
    )
  ).rows;
  const perJob = (n) => n / JOBS;
  const byIndex = {};
  const byTable = {};
  for (const [node, rel] of wal.byRelation) {
    const name = relations.get(node) ?? `rel ${node}`;
    if (rel.entries > 0) byIndex[name] = (byIndex[name] ?? 0) + perJob(rel.entries);
    if (rel.records / JOBS >= 0.005) {
      byTable[name] = { records: perJob(rel.records), fpi: perJob(rel.fpi), bytes: perJob(rel.bytes) };
    }
  }
  return {
    candidate,
    role,
    seconds: done.seconds,
    jobsPerSecond: JOBS / done.seconds,
    dbCpuUs: (dbCpuSeconds * 1e6) / JOBS,
    clientCpuUs: (done.clientCpuSeconds * 1e6) / JOBS,
    statementsPerJob: done.statements === null ? null : perJob(done.statements),
    planningUs: (totals.plan_ms * 1000) / JOBS,
    executionUs: (totals.exec_ms * 1000) / JOBS,
    wal: {
      records: perJob(wal.total.records),
      fpi: perJob(wal.total.fpi),
      bytes: perJob(wal.total.bytes),
      lsnBytes: perJob(end.distance),
      statWal: {
        records: perJob(end.records - start.records),
        fpi: perJob(end.fpi - start.fpi),
        bytes: perJob(end.bytes - start.bytes),
      },
      otherDatabasesRecords: wal.total.otherDatabases,
    },
    indexEntries: Object.values(byIndex).reduce((a, b) => a + b, 0),
    byIndex,
    byType: Object.fromEntries(
      Object.entries(wal.byType).map(([type, t]) => [
        type,
        { records: perJob(t.records), fpi: perJob(t.fpi), bytes: perJob(t.bytes) },
      ]),
    ),
    byTable,
    statements: statements.map((s) => ({
      query: s.query.slice(0, 160),
      callsPerJob: perJob(s.calls),
      msPerCall: s.ms / Math.max(1, s.calls),
      usPerJob: (s.ms * 1000) / JOBS,
      rowsPerCall: s.rows / Math.max(1, s.calls),
      plans: s.plans,
      planMsPerCall: s.plan_ms / Math.max(1, s.calls),
      walRecordsPerJob: perJob(s.wal_records),
    })),
  };
}

async function install(context, id) {
  const { admin, server } = context;
  const name = `study_${id.replace(/\W/g, '_')}`;
  await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${name}`);
  const url = withDatabase(server.url, name);
  const pool = orchestratorPool(url);
  const [{ oid }] = (await admin.query('SELECT oid::int FROM pg_database WHERE datname = $1', [name])).rows;
  const db = { name, url, oid, pool, query: (sql, params) => pool.query(sql, params) };
  context.databases.set(id, db);
  await db.query(require('./study/uuidv7').UUIDV7_SQL);
  log(`${id}: install (and ${SEED} finished workflows)`);
  await CANDIDATES[id]().install(db, SEED);
}

const fixed = (n, digits = 1) => (n === null || n === undefined || Number.isNaN(n) ? '—' : n.toFixed(digits));
const round = (n) => (n === null || Number.isNaN(n) ? '—' : Math.round(n).toLocaleString('en-US'));

function medianOf(runs, pick) {
  const values = runs.map(pick).filter((v) => v !== null && v !== undefined);
  return values.length ? median(values) : null;
}

function report(results, labels) {
  const lines = [];
  const titles = {
    drain: 'Drain (claim + finish)',
    enqueue: 'Enqueue (batches of 1,000)',
    vacuum: 'VACUUM after the drain (what autovacuum would do)',
  };
  for (const role of ['drain', 'enqueue', 'vacuum']) {
    lines.push(
      `\n**${titles[role]}**, per job, medians of ${REPS}:\n`,
      '| candidate | WAL records | FPIs | WAL bytes | index entries | DB CPU µs | planning µs | client CPU µs | jobs/s |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
    );
    for (const id of SELECTED) {
      const runs = results.filter((r) => r.candidate === id && r.role === role);
      if (runs.length === 0) continue;
      lines.push(
        `| ${labels[id]} | ${fixed(medianOf(runs, (r) => r.wal.records))} | ${fixed(
          medianOf(runs, (r) => r.wal.fpi),
          2,
        )} | ` +
          `${round(medianOf(runs, (r) => r.wal.bytes))} | ${fixed(medianOf(runs, (r) => r.indexEntries))} | ` +
          `${round(medianOf(runs, (r) => r.dbCpuUs))} | ${fixed(medianOf(runs, (r) => r.planningUs))} | ` +
          `${role === 'vacuum' ? '—' : round(medianOf(runs, (r) => r.clientCpuUs))} | ` +
          `${role === 'vacuum' ? '—' : round(medianOf(runs, (r) => r.jobsPerSecond))} |`,
      );
    }
  }
  lines.push('\n**Index entries per job, by index** (the last repetition; deterministic):\n');
  for (const id of SELECTED) {
    const last = (role) => results.filter((r) => r.candidate === id && r.role === role).at(-1);
    const describe = (run) =>
      run
        ? Object.entries(run.byIndex)
            .filter(([, n]) => n >= 0.005)
            .sort((a, b) => b[1] - a[1])
            .map(([name, n]) => `${name} ${fixed(n, 2)}`)
            .join(', ')
        : '';
    lines.push(
      `- ${labels[id]}: enqueue: ${describe(last('enqueue')) || 'none'}; drain: ${describe(last('drain')) || 'none'}`,
    );
  }
  lines.push('\n**Drain WAL records per job, by type** (the last repetition; types above 0.02 per job):\n');
  for (const id of SELECTED) {
    const run = results.filter((r) => r.candidate === id && r.role === 'drain').at(-1);
    if (!run) continue;
    const types = Object.entries(run.byType)
      .filter(([, t]) => t.records >= 0.02)
      .sort((a, b) => b[1].records - a[1].records)
      .map(([type, t]) => `${type} ${fixed(t.records, 2)}${t.fpi >= 0.01 ? ` (FPI ${fixed(t.fpi, 2)})` : ''}`)
      .join(', ');
    lines.push(`- ${labels[id]}: ${types}`);
  }
  lines.push('\n**What pg_stat_statements says of the drain** (the last repetition; top statements by time):\n');
  for (const id of SELECTED) {
    const run = results.filter((r) => r.candidate === id && r.role === 'drain').at(-1);
    if (!run) continue;
    lines.push(`- ${labels[id]}:`);
    for (const s of run.statements.filter((s) => s.usPerJob >= 0.5)) {
      lines.push(
        `  - ${fixed(s.usPerJob)} µs/job, ${fixed(s.callsPerJob, 3)} calls/job, ${fixed(s.msPerCall, 2)} ms/call ` +
          `(planning ${fixed(s.planMsPerCall, 2)} ms; planned at ${fixed((s.plans / Math.max(1, s.callsPerJob * JOBS)) * 100, 0)}% of calls), ` +
          `${fixed(s.rowsPerCall)} rows/call, ${fixed(s.walRecordsPerJob, 2)} WAL records/job: \`${s.query.slice(0, 90)}…\``,
      );
    }
  }
  return lines.join('\n');
}

async function main() {
  log('starting a PostgreSQL 15 server of its own ...');
  const server = await startStudyServer();
  const admin = new Client({ connectionString: server.url, application_name: 'bench-orchestrator' });
  await admin.connect();
  const context = { server, admin, databases: new Map() };
  const results = [];
  const labels = {};
  try {
    await admin.query('CREATE EXTENSION pg_stat_statements');
    const [{ version }] = (await admin.query('SHOW server_version')).rows.map((r) => ({ version: r.server_version }));
    for (const id of SELECTED) {
      labels[id] = CANDIDATES[id]().label;
      await install(context, id);
    }
    for (let rep = 0; rep < REPS; rep++) {
      const order = SELECTED.map((_, i) => SELECTED[(i + rep) % SELECTED.length]);
      for (const id of order) {
        for (const role of ['enqueue', 'drain', 'vacuum']) {
          // NOTE: fresh planner statistics before the drain, as the bench's W2 gives every system (autovacuum's).
          if (role === 'drain') await context.databases.get(id).query('ANALYZE');
          const result = await measurePhase(context, id, role, `r${rep}-`);
          results.push(result);
          log(
            `rep ${rep + 1}/${REPS} ${id} ${role}: ${fixed(result.wal.records)} WAL records, ${fixed(result.wal.fpi, 2)} FPI, ` +
              `${round(result.wal.bytes)} B, ${fixed(result.indexEntries)} index entries, ${round(result.dbCpuUs)} µs DB CPU per job; ` +
              `${round(result.jobsPerSecond)} jobs/s`,
          );
        }
      }
    }
    const table = report(results, labels);
    const header =
      `Storage study: ${JOBS.toLocaleString('en-US')} jobs per phase, ${SEED.toLocaleString('en-US')} finished workflows in each history beforehand, ` +
      `${REPS} repetitions (order rotated), arguments of ${INPUT_BYTES ? `${INPUT_BYTES} bytes` : 'a key only'}, ` +
      `plan_cache_mode ${PLAN_CACHE_MODE || 'auto (the default)'}, ` +
      (HELD > 0
        ? `${HELD} workflows claimed before each drain by the layouts the study's driver runs and left PENDING (STUDY_HELD), ` +
          'whose drains end the others and are counted per job of all, ' +
          'while the module and graphile-worker drain all, '
        : '') +
      `PostgreSQL ${version} of the study's own (fsync, full_page_writes, synchronous_commit on), ` +
      `${new Date().toISOString()}.`;
    console.log(`${header}\n${table}`);
    fs.mkdirSync(RESULTS_DIR, { recursive: true });
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    // NOTE: a run of other sizes, arguments, sessions or candidates is partial: it leaves storage-latest.md alone.
    const partial = Object.keys(process.env).some((name) => name.startsWith('STUDY_') && process.env[name] !== '');
    const name = partial ? `storage-partial-${stamp}.json` : `storage-${stamp}.json`;
    fs.writeFileSync(path.join(RESULTS_DIR, name), JSON.stringify({ header, labels, results }, null, 2));
    if (!partial) fs.writeFileSync(path.join(RESULTS_DIR, 'storage-latest.md'), `${header}\n${table}\n`);
  } finally {
    await Promise.all([...context.databases.values()].map((db) => db.pool.end().catch(() => {})));
    await admin.end().catch(() => {});
    await server.dispose();
  }
}

module.exports = { main };

if (require.main === module) {
  main().then(
    () => process.exit(0),
    (error) => {
      console.error(error);
      process.exit(1);
    },
  );
}
