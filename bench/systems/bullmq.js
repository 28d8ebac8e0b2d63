'use strict';
/*
 * BullMQ 6 (https://docs.bullmq.io), on Redis (the default backend) or on its PostgreSQL backend
 * (`createPostgresBackend`, passed as the constructors' last argument; guide "PostgreSQL backend").
 * This module serves both rows: `ctx.options.backend` is 'redis' or 'postgres'.
 *
 * Deduplication: `queue.add(name, data, { deduplication: { id } })` ("simple mode": the id is held until the job
 * completes or fails; a duplicate add returns the existing job and emits `deduplicated`). A call counts as accepted
 * when it returns a job id not returned before.
 *
 * Settings:
 *  - worker: `new Worker(queue, processor, { concurrency: 32 })`; Redis connection with `maxRetriesPerRequest: null`
 *    (required for workers); the blocking wait (BZPOPMIN on Redis, LISTEN/NOTIFY on Postgres) wakes it at once.
 *  - Postgres: the pool `max` sized to the worker's concurrency (32), as the guide's tuning tips say; producers keep
 *    the default pool. `synchronous_commit` is left on (a server-wide durability choice, the same for every system).
 *  - Completed jobs are kept (the default), so the drain can count them; `removeOnComplete` would only make the
 *    store smaller.
 *  - Redis: 127.0.0.1:6379, the bench's own db index (FLUSHDB'd at the start of the run).
 * Prefill uses `addBulk` (the documented bulk path), 1,000 jobs a call.
 */

const NAME = 'noop';

function connectionOf(ctx, role) {
  if (ctx.options.backend === 'postgres') {
    return role === 'worker' ? { connectionString: ctx.databaseUrl, max: 32 } : { connectionString: ctx.databaseUrl };
  }
  return { host: ctx.redis.host, port: ctx.redis.port, db: ctx.redis.db, maxRetriesPerRequest: null };
}

function classes(ctx) {
  const bullmq = require('bullmq');
  if (ctx.options.backend === 'postgres') {
    const bound = bullmq.withBackend(bullmq.createPostgresBackend);
    return { Queue: bound.Queue, Worker: bound.Worker };
  }
  return { Queue: bullmq.Queue, Worker: bullmq.Worker };
}

// The orchestrator keeps one Queue per system for its checks.
const adminQueues = new Map();
function adminQueue(ctx) {
  const key = `${ctx.options.backend}:${ctx.databaseUrl}`;
  let queue = adminQueues.get(key);
  if (!queue) {
    const { Queue } = classes(ctx);
    queue = new Queue(ctx.queueName, { connection: connectionOf(ctx, 'admin') });
    queue.on('error', () => {});
    adminQueues.set(key, queue);
  }
  return queue;
}

module.exports = {
  id: 'bullmq',
  label: 'BullMQ 6',
  settings: 'deduplication: { id }; Worker concurrency 32',
  w4: 'not run: 1,000,000 kept jobs would be seeded through the API (minutes)',

  async install(ctx) {
    if (ctx.options.backend === 'postgres') {
      const { Pool } = require('pg');
      const { runMigrations } = require('bullmq');
      const pool = new Pool({ connectionString: ctx.databaseUrl, max: 1 });
      const client = await pool.connect();
      try {
        await runMigrations(client);
      } finally {
        client.release();
        await pool.end();
      }
    }
  },

  async reset(ctx) {
    await adminQueue(ctx).obliterate({ force: true });
  },

  async prefill(ctx, n) {
    const queue = adminQueue(ctx);
    for (let start = 0; start < n; start += 1000) {
      const jobs = [];
      for (let i = start; i < Math.min(n, start + 1000); i++) {
        jobs.push({ name: NAME, data: { i }, opts: { deduplication: { id: `p${i}` } } });
      }
      await queue.addBulk(jobs);
    }
  },

  async pending(ctx) {
    const counts = await adminQueue(ctx).getJobCounts(
      'waiting',
      'active',
      'delayed',
      'prioritized',
      'waiting-children',
      'paused',
    );
    return Object.values(counts).reduce((sum, n) => sum + n, 0);
  },

  async completed(ctx) {
    return (await adminQueue(ctx).getJobCounts('completed')).completed;
  },

  async stored(ctx) {
    return this.pending(ctx);
  },

  async teardown() {
    await Promise.all([...adminQueues.values()].map((queue) => queue.close().catch(() => {})));
    adminQueues.clear();
  },

  // ---- in a child process ----

  async producer(ctx) {
    const { Queue } = classes(ctx);
    const queue = new Queue(ctx.queueName, { connection: connectionOf(ctx, 'producer') });
    queue.on('error', (error) => console.error('bullmq queue error', error.message));
    await queue.waitUntilReady();
    const seen = new Set();
    return {
      async enqueue(key, payload) {
        const job = await queue.add(NAME, payload, { deduplication: { id: key } });
        if (seen.has(job.id)) return false;
        seen.add(job.id);
        return true;
      },
      close: () => queue.close(),
    };
  },

  async worker(ctx, { concurrency, onJob }) {
    const { Worker } = classes(ctx);
    const worker = new Worker(
      ctx.queueName,
      async (job) => {
        onJob(job.data);
      },
      { connection: connectionOf(ctx, 'worker'), concurrency },
    );
    worker.on('error', (error) => console.error('bullmq worker error', error.message));
    await worker.waitUntilReady();
    return { close: () => worker.close() };
  },
};
