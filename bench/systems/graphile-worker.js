'use strict';
/*
 * graphile-worker (https://worker.graphile.org), Postgres. 0.17.3: the newest release that runs on Node 20
 * (0.18 requires Node >= 22.18).
 *
 * Deduplication: `addJob(task, payload, { jobKey, jobKeyMode: 'unsafe_dedupe' })`: while a job with that key
 * exists (queued or running) the call changes nothing and returns the existing job; completed jobs are deleted,
 * which frees the key. A call counts as accepted when it returns a job id not returned before.
 *
 * Fast path and settings, from the project's "Performance" page:
 *  - `concurrentJobs` (concurrency) 32, `maxPoolSize` 34 ("concurrentJobs + 2"),
 *  - `localQueue: { size: 33 }` (batch fetching, "a good starting point is concurrentJobs + 1"),
 *  - `completeJobBatchDelay: 0` (batched completions; "even 0 can be impactful"),
 *  - LISTEN/NOTIFY wake-ups (built in), default `pollInterval` (2 s) as the fallback.
 * Producers use `makeWorkerUtils()` (one pool, default size 10) and `addJob`. Prefill uses `addJobs` (bulk).
 */
const { query } = require('../lib/pg');

const TASK = 'noop';
const JOBS = 'graphile_worker._private_jobs';

module.exports = {
  id: 'graphile-worker',
  label: 'graphile-worker 0.17',
  backend: 'postgres',
  settings: "jobKey + jobKeyMode 'unsafe_dedupe'; concurrency 32, localQueue 33, completeJobBatchDelay 0",
  w4: 'deletes completed jobs: there is no history to grow',

  async install(ctx) {
    const { runMigrations } = require('graphile-worker');
    await runMigrations({ connectionString: ctx.databaseUrl, logger: quietLogger() });
  },

  async reset(ctx) {
    await query(ctx.databaseUrl, `DELETE FROM ${JOBS}`);
    await query(ctx.databaseUrl, `DELETE FROM graphile_worker._private_job_queues`).catch(() => {});
  },

  async prefill(ctx, n) {
    const { makeWorkerUtils } = require('graphile-worker');
    const utils = await makeWorkerUtils({ connectionString: ctx.databaseUrl, logger: quietLogger() });
    try {
      for (let start = 0; start < n; start += 5000) {
        const specs = [];
        for (let i = start; i < Math.min(n, start + 5000); i++)
          specs.push({ identifier: TASK, payload: { i }, jobKey: `p${i}` });
        await utils.addJobs(specs);
      }
    } finally {
      await utils.release();
    }
  },

  async pending(ctx) {
    const [row] = await query(ctx.databaseUrl, `SELECT count(*)::int AS n FROM ${JOBS}`);
    return row.n;
  },

  completed: null, // completed jobs are deleted; the drain checks that every body ran and no job is left

  async stored(ctx) {
    return this.pending(ctx);
  },

  // ---- in a child process ----

  async producer(ctx) {
    const { makeWorkerUtils } = require('graphile-worker');
    const utils = await makeWorkerUtils({ connectionString: ctx.databaseUrl, logger: quietLogger() });
    const seen = new Set();
    return {
      async enqueue(key, payload) {
        const job = await utils.addJob(TASK, payload, { jobKey: key, jobKeyMode: 'unsafe_dedupe' });
        const id = String(job.id);
        if (seen.has(id)) return false;
        seen.add(id);
        return true;
      },
      close: () => utils.release(),
    };
  },

  async worker(ctx, { concurrency, onJob }) {
    const { run } = require('graphile-worker');
    const runner = await run({
      connectionString: ctx.databaseUrl,
      concurrency,
      maxPoolSize: Math.max(10, concurrency + 2),
      noHandleSignals: true,
      logger: quietLogger(),
      taskList: {
        [TASK]: async (payload) => {
          onJob(payload);
        },
      },
      preset: {
        worker: {
          localQueue: { size: concurrency + 1 },
          completeJobBatchDelay: 0,
        },
      },
    });
    return { close: () => runner.stop() };
  },
};

function quietLogger() {
  const { Logger } = require('graphile-worker');
  return new Logger(() => (level, message) => {
    if (level === 'error') console.error(`graphile-worker: ${message}`);
  });
}
