'use strict';
/*
 * npm run bench -- --wal (or node bench/storage/wal-per-job.js): what one job costs the database, in WAL, on the
 * previous release's layout (0.2.0, one `workflows` table) and on this one's (active work apart from history), in
 * one run. For each release, in a schema of its own: boot the module (its migrations), enqueue WAL_JOBS (20,000)
 * no-op workflows with enqueueMany, then drain them with one worker process (workerConcurrency 32), and read
 * `pg_stat_wal` (records, full-page images, bytes) around the enqueue and around the drain, after a CHECKPOINT each.
 * pg_stat_wal is server-wide: run it on a quiet server (the bench's own, or nothing else connected).
 * Needs `npm run build` first; PostgreSQL at BENCH_DATABASE_URL / DATABASE_URL.
 */
const path = require('node:path');

const REPO_DIR = path.resolve(__dirname, '..', '..');
const url = process.env.BENCH_DATABASE_URL || process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const JOBS = Number(process.env.WAL_JOBS ?? 20_000);
const QUEUE = 'wal';
const log = (message) => process.stderr.write(`[wal ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

async function walNow(pool) {
  await pool.query('CHECKPOINT');
  const { rows } = await pool.query(
    'SELECT wal_records::float8 AS records, wal_fpi::float8 AS fpi, wal_bytes::float8 AS bytes FROM pg_stat_wal',
  );
  return rows[0];
}

function perJob(before, after) {
  return {
    records: (after.records - before.records) / JOBS,
    fpi: (after.fpi - before.fpi) / JOBS,
    bytes: (after.bytes - before.bytes) / JOBS,
  };
}

/** Boots the module of `dist` (a release's build) with one no-op workflow; `worker` as in forRoot. */
async function boot(dist, schema, worker) {
  const { Injectable, Module } = require('@nestjs/common');
  const { NestFactory } = require('@nestjs/core');
  const library = require(path.join(dist, 'index.js'));
  class WalTasks {
    async noop() {
      return null;
    }
  }
  library.Workflow({ name: 'WalTasks.noop' })(
    WalTasks.prototype,
    'noop',
    Object.getOwnPropertyDescriptor(WalTasks.prototype, 'noop'),
  );
  Injectable()(WalTasks);
  class WalModule {}
  Module({
    imports: [
      library.DedupQueueModule.forRoot({
        connection: { url },
        schema,
        queues: [{ name: QUEUE, workerConcurrency: 32 }],
        worker,
      }),
    ],
    providers: [WalTasks],
  })(WalModule);
  const app = await NestFactory.createApplicationContext(WalModule, { logger: ['error'] });
  return { app, queues: app.get(library.QueueService), tasks: app.get(WalTasks) };
}

async function measure(label, dist, pool) {
  const schema = `bench_wal_${label.replace(/\W/g, '_')}`;
  await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  const producer = await boot(dist, schema, false);
  const before = await walNow(pool);
  for (let at = 0; at < JOBS; at += 1000) {
    const items = Array.from({ length: Math.min(1000, JOBS - at) }, (_, n) => ({
      args: [],
      options: { deduplicationId: `k${at + n}` },
    }));
    await producer.queues.enqueueMany(QUEUE, 'WalTasks.noop', items);
  }
  // NOTE: a backend reports its WAL counters when it is idle long enough or exits: close the app's connections first.
  await producer.app.close();
  const enqueued = await walNow(pool);
  const started = Date.now();
  const worker = await boot(dist, schema, true);
  for (;;) {
    const { rows } = await pool.query(
      `SELECT count(*)::int AS n FROM ${schema}.workflows WHERE status IN ('ENQUEUED', 'PENDING')`,
    );
    if (rows[0].n === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const seconds = (Date.now() - started) / 1000;
  await worker.app.close();
  const drained = await walNow(pool);
  await pool.query(`DROP SCHEMA ${schema} CASCADE`);
  return { label, enqueue: perJob(before, enqueued), drain: perJob(enqueued, drained), jobsPerSecond: JOBS / seconds };
}

async function main() {
  require(path.join(REPO_DIR, 'test', 'support', 'swc-register.js'));
  const { PREVIOUS_RELEASE, buildPreviousRelease } = require(path.join(REPO_DIR, 'test/support/previous-release.ts'));
  log(`building nest-dedup-queue ${PREVIOUS_RELEASE.version} (${PREVIOUS_RELEASE.commit}) from git (cached) ...`);
  const previousDist = path.join(buildPreviousRelease(), 'dist');
  const currentDist = path.join(REPO_DIR, 'packages', 'nest-dedup-queue', 'dist');
  const { Pool } = require('pg');
  const pool = new Pool({ connectionString: url, max: 2 });
  const results = [];
  for (const [label, dist] of [
    [PREVIOUS_RELEASE.version, previousDist],
    ['this build', currentDist],
    [PREVIOUS_RELEASE.version, previousDist],
    ['this build', currentDist],
  ]) {
    log(`${label}: ${JOBS} jobs ...`);
    results.push(await measure(label, dist, pool));
  }
  await pool.end();
  const fixed = (n) => n.toFixed(1);
  console.log(`\n${JOBS} jobs each, WAL per job (records / full-page images / bytes), two runs each, interleaved\n`);
  console.log('| release | enqueue | drain (claim + finish) | drain jobs/s (one process, 32 slots) |');
  console.log('|---|---:|---:|---:|');
  for (const r of results) {
    console.log(
      `| ${r.label} | ${fixed(r.enqueue.records)} / ${fixed(r.enqueue.fpi)} / ${Math.round(r.enqueue.bytes)} B | ` +
        `${fixed(r.drain.records)} / ${fixed(r.drain.fpi)} / ${Math.round(r.drain.bytes)} B | ${Math.round(r.jobsPerSecond)} |`,
    );
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
