'use strict';
/*
 * nest-dedup-queue: this repository's library, as built by `npm run build` (packages/nest-dedup-queue/dist).
 *
 * Used exactly as an application would: `NestFactory.createApplicationContext(BenchModule)` where BenchModule
 * imports `DedupQueueModule.forRoot({ connection: { url }, schema, queues: [{ name, workerConcurrency }] })` and
 * provides a class with a `@Workflow()` no-op method. Enqueue is `QueueService.enqueue(queue, tasks.run, [payload],
 * { deduplicationId })`; a duplicate is the `QueueDeduplicatedError` it throws.
 *
 * Settings: the module's defaults for everything (pool size, poll interval, LISTEN/NOTIFY wake-ups, outcome
 * writes), except `workerConcurrency: 32` on the worker, which the workloads prescribe. Producers are the same module
 * with `worker: false` (W1 has no workers; W3's producer is a separate process from its worker).
 *
 * The library and its peer dependencies (@nestjs/*, typeorm, pg, rxjs, reflect-metadata) are loaded from the
 * repository (the root node_modules), not from bench/node_modules.
 *
 * Orchestrator-side SQL (prefill, counts, W4 seed) writes the same row that `enqueue` writes, and the same finished
 * row that a recorded outcome leaves (status SUCCESS, completed_at set, active_deduplication_id NULL).
 */
const path = require('node:path');
const { LIBRARY_DIST, REPO_DIR } = require('../lib/config');
const { query } = require('../lib/pg');

const SCHEMA = 'dedup_queue';
/** The view of every workflow; enqueue writes the active table, a finish moves the row to the history (1.0). */
const TABLE = `${SCHEMA}.workflows`;
const ACTIVE = `${SCHEMA}.workflow_queue`;
const HISTORY = `${SCHEMA}.workflow_history`;
/** The ready rows of queued workflows, since 2.0 (migration 25): a claim takes only a workflow that has one. */
const READY = `${SCHEMA}.workflow_ready`;
/**
 * The active and history tables of the schema's layout: 0.2.0 (a baseline build) kept both in `workflows`; `ready`
 * when the layout has ready rows.
 */
async function layoutTables(ctx) {
  const [row] = await query(
    ctx.databaseUrl,
    `SELECT to_regclass($1) IS NOT NULL AS split, to_regclass($2) IS NOT NULL AS ready`,
    [ACTIVE, READY],
  );
  const tables = row.split ? { active: ACTIVE, history: HISTORY } : { active: TABLE, history: TABLE };
  return { ...tables, ready: row.ready ? READY : undefined };
}
const WORKFLOW_NAME = 'BenchTasks.run';

let onJob = () => {};

/** The build to measure: the repository's, or the baseline's (`options.dist`, see BENCH_BASELINE_DIST). */
function loadNest(ctx) {
  const dist = ctx.options && ctx.options.dist ? path.resolve(REPO_DIR, ctx.options.dist) : LIBRARY_DIST;
  // Resolve everything from the library's own location so there is one copy of @nestjs/* and reflect-metadata.
  const from = (id) => require(require.resolve(id, { paths: [dist] }));
  from('reflect-metadata');
  const common = from('@nestjs/common');
  const core = from('@nestjs/core');
  const lib = require(dist);
  return { common, core, lib };
}

async function createApp(ctx, { worker }) {
  const { common, core, lib } = loadNest(ctx);

  class BenchTasks {
    async run(payload) {
      onJob(payload);
    }
  }
  common.Injectable()(BenchTasks);
  lib.Workflow()(BenchTasks.prototype, 'run', Object.getOwnPropertyDescriptor(BenchTasks.prototype, 'run'));
  // `options.isolate` (bench/isolation/measure.js): the same workflow with isolate: 'thread', counted as it reports.
  const isolated = ctx.options && ctx.options.isolate ? require('./nest-dedup-queue-isolated') : null;
  const stopListening = isolated && worker ? isolated.listenForJobs((payload) => onJob(payload)) : () => {};

  class BenchModule {}
  common.Module({
    imports: [
      lib.DedupQueueModule.forRoot({
        // Behind PgBouncer (transaction pooling): statements through the pooler, wake-ups on a direct connection.
        ...(ctx.pooledUrl
          ? { connection: { url: ctx.pooledUrl }, pooler: 'transaction', listen: { url: ctx.databaseUrl } }
          : { connection: { url: ctx.databaseUrl } }),
        schema: SCHEMA,
        queues: [{ name: ctx.queueName, workerConcurrency: ctx.concurrency ?? 32 }],
        worker,
      }),
    ],
    providers: [isolated ? isolated.IsolatedBenchTasks : BenchTasks],
  })(BenchModule);

  const app = await core.NestFactory.createApplicationContext(BenchModule, { logger: ['error', 'warn'] });
  const close = app.close.bind(app);
  app.close = () => close().finally(stopListening);
  const tasks = app.get(isolated ? isolated.IsolatedBenchTasks : BenchTasks);
  return { app, lib, tasks, queueService: app.get(lib.QueueService) };
}

/**
 * Counts the statements the library sends (on its own `pg`) and notes when the worker first sent a claim (a statement
 * with SKIP LOCKED): start-up is measured from the end of `createApplicationContext` to it.
 */
function watchStatements() {
  const pg = require(require.resolve('pg', { paths: [LIBRARY_DIST] }));
  const original = pg.Client.prototype.query;
  let firstClaim = null;
  let statements = 0;
  pg.Client.prototype.query = function query(config, ...rest) {
    statements++;
    if (firstClaim === null) {
      const text = typeof config === 'string' ? config : config && config.text;
      if (typeof text === 'string' && text.includes('SKIP LOCKED')) firstClaim = process.hrtime.bigint();
    }
    return original.call(this, config, ...rest);
  };
  return { firstClaimNs: () => firstClaim, statements: () => statements };
}

module.exports = {
  id: 'nest-dedup-queue',
  label: 'nest-dedup-queue',
  backend: 'postgres',
  settings: 'module defaults; workerConcurrency 32; producer with worker:false',
  w4: true,

  async install(ctx) {
    // Booting the module runs its migrations.
    const { app } = await createApp(ctx, { worker: false });
    await app.close();
  },

  async reset(ctx) {
    const { active, history, ready } = await layoutTables(ctx);
    const tables = [...new Set([active, history]), ...(ready ? [ready] : []), `${SCHEMA}.steps`];
    await query(ctx.databaseUrl, `TRUNCATE ${tables.join(', ')}`);
  },

  /** n ENQUEUED workflows with distinct deduplication IDs: the row `QueueService.enqueue` inserts. */
  async prefill(ctx, n) {
    const { active, ready } = await layoutTables(ctx);
    const insert = `INSERT INTO ${active} (workflow_id, queue_name, workflow_name, status, deduplication_id, active_deduplication_id, inputs)
       SELECT gen_random_uuid()::text, $1, $2, 'ENQUEUED', 'p' || i, 'p' || i, json_build_array(json_build_object('i', i))
       FROM generate_series(1, $3::int) AS i`;
    await query(
      ctx.databaseUrl,
      ready
        ? `WITH inserted AS (${insert} RETURNING queue_name, priority, seq, workflow_id, partition_key)
           INSERT INTO ${ready} (queue_name, priority, seq, workflow_id, partition_key) SELECT * FROM inserted`
        : insert,
      [ctx.queueName, WORKFLOW_NAME, n],
    );
  },

  /** W4: n finished workflows, as a recorded outcome leaves them. */
  async seedFinished(ctx, n) {
    const { history } = await layoutTables(ctx);
    await query(
      ctx.databaseUrl,
      `INSERT INTO ${history} (workflow_id, queue_name, workflow_name, status, deduplication_id, active_deduplication_id,
                             inputs, executor_id, attempts, started_at, completed_at)
       SELECT gen_random_uuid()::text, $1, $2, 'SUCCESS', 'old' || i, NULL, json_build_array(json_build_object('i', i)),
              'seed', 1, now() - interval '1 hour', now() - interval '1 hour'
       FROM generate_series(1, $3::int) AS i`,
      [ctx.queueName, WORKFLOW_NAME, n],
    );
    await query(ctx.databaseUrl, `VACUUM ANALYZE ${history}`);
  },

  async pending(ctx) {
    const [row] = await query(
      ctx.databaseUrl,
      `SELECT count(*)::int AS n FROM ${TABLE} WHERE queue_name = $1 AND status IN ('ENQUEUED', 'PENDING')`,
      [ctx.queueName],
    );
    return row.n;
  },

  async completed(ctx) {
    const [row] = await query(
      ctx.databaseUrl,
      `SELECT count(*)::int AS n FROM ${TABLE} WHERE queue_name = $1 AND status = 'SUCCESS' AND executor_id <> 'seed'`,
      [ctx.queueName],
    );
    return row.n;
  },

  async stored(ctx) {
    const [row] = await query(ctx.databaseUrl, `SELECT count(*)::int AS n FROM ${TABLE} WHERE queue_name = $1`, [
      ctx.queueName,
    ]);
    return row.n;
  },

  // ---- in a child process ----

  async producer(ctx) {
    const { app, lib, tasks, queueService } = await createApp(ctx, { worker: false });
    return {
      async enqueue(key, payload) {
        try {
          await queueService.enqueue(ctx.queueName, tasks.run, [payload], { deduplicationId: key });
          return true;
        } catch (error) {
          if (error instanceof lib.QueueDeduplicatedError) return false;
          throw error;
        }
      },
      close: () => app.close(),
    };
  },

  async worker(ctx, hooks) {
    onJob = hooks.onJob;
    const watch = watchStatements();
    const { app } = await createApp({ ...ctx, concurrency: hooks.concurrency }, { worker: true });
    return { close: () => app.close(), ...watch };
  },
};
