'use strict';
/*
 * pg-boss 12 (https://github.com/timgit/pg-boss), Postgres.
 *
 * Deduplication: a queue created with `policy: 'exclusive'` ("only allows 1 job to be queued or active, extended
 * with singletonKey"), and `send(name, data, { singletonKey })`, which resolves to null when the key is taken.
 *
 * Fast path and settings, as documented for throughput and latency:
 *  - worker: `work(name, { batchSize: 32, burstWhenBatchFull: true }, handler)`: one fetch claims up to 32 jobs
 *    (the batch is the worker's concurrency) and fetching continues without delay while batches come back full;
 *    the whole batch is completed in one call when the handler resolves.
 *  - `useListenNotify: true` on the instance and `notify: true` on the queue, so an enqueue wakes the worker at once
 *    instead of after `pollingIntervalSeconds` (default 2 s); polling stays on as the fallback (0.5 s, the minimum).
 *  - everything else at its defaults (pool `max` 10, maintenance on).
 * Prefill uses `insert(name, jobs)`, pg-boss's documented bulk path.
 */
const { query } = require('../lib/pg');

async function boss(ctx, extra = {}) {
  const { PgBoss } = require('pg-boss');
  const instance = new PgBoss({ connectionString: ctx.databaseUrl, ...extra });
  instance.on('error', (error) => console.error('pg-boss error', error.message));
  await instance.start();
  return instance;
}

const JOB = 'pgboss.job';

module.exports = {
  id: 'pg-boss',
  label: 'pg-boss 12',
  backend: 'postgres',
  settings: "policy 'exclusive' + singletonKey; work batchSize 32, burstWhenBatchFull; LISTEN/NOTIFY on",
  w4: true,

  async install(ctx) {
    const b = await boss(ctx);
    await b.createQueue(ctx.queueName, { policy: 'exclusive', notify: true });
    await b.stop({ graceful: false, wait: true });
  },

  async reset(ctx) {
    await query(ctx.databaseUrl, `DELETE FROM ${JOB} WHERE name = $1`, [ctx.queueName]);
  },

  async prefill(ctx, n) {
    const b = await boss(ctx, { supervise: false, schedule: false });
    try {
      for (let start = 0; start < n; start += 5000) {
        const jobs = [];
        for (let i = start; i < Math.min(n, start + 5000); i++) jobs.push({ data: { i }, singletonKey: `p${i}` });
        await b.insert(ctx.queueName, jobs);
      }
    } finally {
      await b.stop({ graceful: false, wait: true });
    }
  },

  /** W4: n completed jobs of the queue, as pg-boss keeps them until `deleteAfterSeconds` (7 days). */
  async seedFinished(ctx, n) {
    await query(
      ctx.databaseUrl,
      `INSERT INTO ${JOB} (name, data, state, policy, singleton_key, started_on, completed_on, created_on)
       SELECT $1, json_build_object('i', i)::jsonb, 'completed', 'exclusive', 'old' || i, now() - interval '1 hour',
              now() - interval '1 hour', now() - interval '1 hour'
       FROM generate_series(1, $2::int) AS i`,
      [ctx.queueName, n],
    );
    await query(ctx.databaseUrl, `VACUUM ANALYZE ${JOB}`);
  },

  async pending(ctx) {
    const [row] = await query(
      ctx.databaseUrl,
      `SELECT count(*)::int AS n FROM ${JOB} WHERE name = $1 AND state IN ('created', 'retry', 'active')`,
      [ctx.queueName],
    );
    return row.n;
  },

  async completed(ctx) {
    const [row] = await query(
      ctx.databaseUrl,
      `SELECT count(*)::int AS n FROM ${JOB} WHERE name = $1 AND state = 'completed' AND singleton_key NOT LIKE 'old%'`,
      [ctx.queueName],
    );
    return row.n;
  },

  async stored(ctx) {
    const [row] = await query(ctx.databaseUrl, `SELECT count(*)::int AS n FROM ${JOB} WHERE name = $1`, [
      ctx.queueName,
    ]);
    return row.n;
  },

  // ---- in a child process ----

  async producer(ctx) {
    const b = await boss(ctx);
    return {
      async enqueue(key, payload) {
        return (await b.send(ctx.queueName, payload, { singletonKey: key })) !== null;
      },
      close: () => b.stop({ graceful: false, wait: true }),
    };
  },

  async worker(ctx, { concurrency, onJob }) {
    const b = await boss(ctx, { useListenNotify: true });
    await b.work(
      ctx.queueName,
      { batchSize: concurrency, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 },
      async (jobs) => {
        await Promise.all(jobs.map(async (job) => onJob(job.data)));
      },
    );
    return { close: () => b.stop({ graceful: true, wait: true, timeout: 5000 }) };
  },
};
