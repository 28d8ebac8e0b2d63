'use strict';
/*
 * Shared by the observability measurements: load the repository's build of nest-dedup-queue (and its peers from
 * the root node_modules) and boot it in this process as an application would.
 */
const path = require('node:path');

const ROOT = path.resolve(__dirname, '../..');
const LIBRARY_DIST = path.join(ROOT, 'packages/nest-dedup-queue/dist');
const fromRoot = (id) => require(require.resolve(id, { paths: [LIBRARY_DIST] }));

fromRoot('reflect-metadata');
const common = fromRoot('@nestjs/common');
const core = fromRoot('@nestjs/core');
const lib = require(LIBRARY_DIST);
const { Pool } = fromRoot('pg');

const DATABASE_URL =
  process.env.BENCH_DATABASE_URL ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** A provider with one no-op `@Workflow()`, `BenchTasks.run`. */
function benchTasks() {
  class BenchTasks {
    async run() {}
  }
  common.Injectable()(BenchTasks);
  lib.Workflow()(BenchTasks.prototype, 'run', Object.getOwnPropertyDescriptor(BenchTasks.prototype, 'run'));
  return BenchTasks;
}

/** Boots DedupQueueModule with `options` (merged over a connection to DATABASE_URL) and the bench workflow. */
async function startApp(options) {
  class BenchModule {}
  common.Module({
    imports: [lib.DedupQueueModule.forRoot({ connection: { url: DATABASE_URL }, ...options })],
    providers: [benchTasks()],
  })(BenchModule);
  const app = await core.NestFactory.createApplicationContext(BenchModule, { logger: ['error', 'warn'] });
  return { app, queues: app.get(lib.QueueService) };
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

module.exports = { DATABASE_URL, Pool, fromRoot, lib, median, startApp };
