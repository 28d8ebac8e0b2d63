'use strict';
// Everything the run can be told from the environment, with the defaults the issue asks for.
const path = require('node:path');

const int = (name, fallback) => {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a non-negative integer, got "${raw}"`);
  return value;
};

const BENCH_DIR = path.resolve(__dirname, '..');
const REPO_DIR = path.resolve(BENCH_DIR, '..');

// A run with a subset of systems or workloads, other sizes or fewer repetitions is "partial": it writes
// results/partial-<time>.json only, and leaves latest.*, bench/README.md's table and docs/performance.md alone. A
// baseline build (BENCH_BASELINE_DIST) adds a row to a whole run and leaves it whole.
const partial = Object.keys(process.env).some(
  (name) =>
    /^BENCH_(SYSTEMS|WORKLOADS|REPS|STALE_REPS|VARIANT_REPS|VARIANTS|LIBRARY_DIST|W\d_)/.test(name) &&
    process.env[name] !== '',
);

module.exports = {
  partial,
  BENCH_DIR,
  REPO_DIR,
  // BENCH_LIBRARY_DIST: another build to measure (a copy of an earlier dist/ inside the repository, so that its peer
  // dependencies resolve from the root node_modules), e.g. a baseline next to a change.
  LIBRARY_DIST: process.env.BENCH_LIBRARY_DIST
    ? path.resolve(REPO_DIR, process.env.BENCH_LIBRARY_DIST)
    : path.join(REPO_DIR, 'packages', 'nest-dedup-queue', 'dist'),
  RESULTS_DIR: path.join(BENCH_DIR, 'results'),

  // Where the per-system databases are created (CREATE DATABASE bench_<system>, dropped first).
  adminUrl: process.env.BENCH_DATABASE_URL || process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres',
  databaseUrlExplicit: Boolean(process.env.BENCH_DATABASE_URL || process.env.DATABASE_URL),
  redis: {
    host: process.env.BENCH_REDIS_HOST || '127.0.0.1',
    port: int('BENCH_REDIS_PORT', 6379),
    db: int('BENCH_REDIS_DB', 5), // FLUSHDB'd at the start of each run: keep it dedicated to the bench
  },

  // Only these systems (comma-separated ids), e.g. BENCH_SYSTEMS=nest-dedup-queue,raw-sql
  systems: process.env.BENCH_SYSTEMS
    ? process.env.BENCH_SYSTEMS.split(',')
        .map((s) => s.trim())
        .filter(Boolean)
    : null,
  // Only these workloads, e.g. BENCH_WORKLOADS=w1,w2
  workloads: process.env.BENCH_WORKLOADS
    ? process.env.BENCH_WORKLOADS.split(',').map((s) => s.trim().toLowerCase())
    : null,

  reps: int('BENCH_REPS', 3),
  // W2 with stale statistics runs in the first `staleReps` repetitions; nest-dedup-queue's W2 variants (PgBouncer,
  // 1/2/4 worker processes) `variantReps` times each (the time budget). BENCH_VARIANTS=0 skips the variants.
  staleReps: Math.min(int('BENCH_REPS', 3), int('BENCH_STALE_REPS', 2)),
  variantReps: int('BENCH_VARIANT_REPS', 1),
  variants: int('BENCH_VARIANTS', 1) > 0,
  queueName: 'bench',
  // A W1 storm still running after maxSeconds is cut short (rate over the calls made; see workloads/w1-dedup-storm.js).
  w1: {
    calls: int('BENCH_W1_CALLS', 20_000),
    keys: int('BENCH_W1_KEYS', 2_000),
    producers: 16,
    maxSeconds: int('BENCH_W1_MAX_SECONDS', 30),
  },
  w2: { jobs: int('BENCH_W2_JOBS', 20_000), concurrency: 32 },
  w3: { jobs: int('BENCH_W3_JOBS', 2_000), ratePerSecond: 200, concurrency: 32 },
  w4: { finished: int('BENCH_W4_FINISHED', 1_000_000) },
  w5: { backlog: int('BENCH_W5_BACKLOG', 100_000), maxSeconds: int('BENCH_W5_MAX_SECONDS', 10) },
  // Before each measurement, wait up to this long for other PostgreSQL clients on the server to go idle.
  quietWaitMs: int('BENCH_QUIET_WAIT_MS', 3000),
  // A drain that has not finished after this long is reported as failed (it would be far off every target anyway).
  drainTimeoutMs: int('BENCH_DRAIN_TIMEOUT_MS', 60_000),
};
