#!/usr/bin/env node
'use strict';
/*
 * What migration 010's dashboard indexes cost the hot paths: nest-dedup-queue's W1 (dedup storm) and W2 (drain, fresh
 * statistics) with the four indexes present and dropped, interleaved, medians of BENCH_REPS (default 2). A one-off
 * measurement (the figure is in docs/dashboard.md), on bench_index_cost (dropped and recreated).
 *
 *   npm run build && node bench/dashboard-index-cost.js
 */
const config = require('./lib/config');
const { recreateDatabase, query, closePools } = require('./lib/pg');
const { runRole } = require('./lib/proc');
const { median } = require('./lib/stats');
const dedupStorm = require('./workloads/w1-dedup-storm');
const { drain } = require('./workloads/w2-drain');

const INDEXES = [
  'workflows_by_queue_status',
  'workflows_by_workflow_name',
  'workflows_by_deduplication_id',
  'workflows_by_partition_key',
];
const REPS = Number(process.env.BENCH_REPS || 2);

async function main() {
  const databaseUrl = await recreateDatabase(config.adminUrl, 'index_cost');
  const system = { module: 'nest-dedup-queue', adapter: require('./systems/nest-dedup-queue') };
  const ctx = { databaseUrl, adminUrl: config.adminUrl, queueName: config.queueName, options: {}, storePids: [] };
  await runRole({ module: system.module, ctx, role: 'install' }, 120_000);
  const definitions = await query(
    databaseUrl,
    `SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'dedup_queue' AND indexname = ANY($1)`,
    [INDEXES],
  );
  if (definitions.length !== INDEXES.length) throw new Error(`expected the ${INDEXES.length} indexes of migration 010`);
  const variants = {
    present: () =>
      Promise.all(
        definitions.map((d) => query(databaseUrl, d.indexdef.replace('CREATE INDEX', 'CREATE INDEX IF NOT EXISTS'))),
      ),
    dropped: () => Promise.all(INDEXES.map((name) => query(databaseUrl, `DROP INDEX IF EXISTS dedup_queue.${name}`))),
  };
  const results = { present: { w1: [], w2: [] }, dropped: { w1: [], w2: [] } };
  for (let rep = 0; rep < REPS; rep++) {
    for (const [variant, apply] of Object.entries(variants)) {
      await apply();
      const w1 = await dedupStorm(system, ctx, config);
      const w2 = await drain(system, ctx, config, { jobs: config.w2.jobs });
      results[variant].w1.push(w1.perSecond);
      results[variant].w2.push(w2.perSecond);
      console.log(
        `rep ${rep + 1}, indexes ${variant}: W1 ${Math.round(w1.perSecond)} calls/s, W2 ${Math.round(w2.perSecond)} jobs/s`,
      );
    }
  }
  await variants.present();
  await closePools();
  for (const workload of ['w1', 'w2']) {
    const present = median(results.present[workload]);
    const dropped = median(results.dropped[workload]);
    console.log(
      `${workload.toUpperCase()}: ${Math.round(present)}/s with the dashboard indexes, ${Math.round(dropped)}/s without ` +
        `(with them: ${(((present - dropped) / dropped) * 100).toFixed(1)}%)`,
    );
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
