'use strict';
/*
 * raw SQL: the limit, with no library at all (node-postgres only).
 *
 * Table: one row per job (uuid primary key, identity `seq` for FIFO order), with the deduplication key kept twice, `dedup_key` (forever) and `active_key` (cleared
 * when the job ends), and the partial unique index UNIQUE (queue, active_key) WHERE active_key IS NOT NULL, the
 * same design nest-dedup-queue uses; plus a partial index of the ready rows for claiming.
 *
 * Enqueue (W1): one single-row `INSERT ... ON CONFLICT (queue, active_key) WHERE active_key IS NOT NULL DO NOTHING
 * RETURNING id` per call, autocommit, 16 producers on a pool of 16 connections. In W3 the same INSERT also calls
 * pg_notify in the same statement, so the worker wakes on commit.
 *
 * Workers (W2 "batch 1"): 32 loops, each on its own connection: claim one row
 * (UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1)), run it, mark it done (active_key = NULL).
 * Workers ("batch 32"): one loop: claim up to 32 rows in one UPDATE, run them, mark them all done in one UPDATE.
 * Both LISTEN for the enqueue notification when idle and poll every second as a fallback.
 */
const { Pool } = require('pg');
const { query } = require('../lib/pg');

const CHANNEL = 'bench_jobs';

const SCHEMA_SQL = `
  CREATE TABLE jobs (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq          bigint GENERATED ALWAYS AS IDENTITY,
    queue        text NOT NULL,
    dedup_key    text,
    active_key   text,
    status       text NOT NULL DEFAULT 'queued',
    payload      json NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz
  );
  CREATE UNIQUE INDEX jobs_active_key ON jobs (queue, active_key) WHERE active_key IS NOT NULL;
  CREATE INDEX jobs_ready ON jobs (queue, seq) WHERE status = 'queued';
`;

module.exports = {
  id: 'raw-sql',
  label: 'raw SQL',
  backend: 'postgres',
  settings: 'INSERT … ON CONFLICT DO NOTHING (16 conns); claim/complete loops, SKIP LOCKED',
  w4: true,

  async install(ctx) {
    await query(ctx.databaseUrl, SCHEMA_SQL);
  },

  async reset(ctx) {
    await query(ctx.databaseUrl, 'TRUNCATE jobs');
  },

  async prefill(ctx, n) {
    await query(
      ctx.databaseUrl,
      `INSERT INTO jobs (queue, dedup_key, active_key, payload)
       SELECT $1, 'p' || i, 'p' || i, json_build_object('i', i) FROM generate_series(1, $2::int) AS i`,
      [ctx.queueName, n],
    );
  },

  async seedFinished(ctx, n) {
    await query(
      ctx.databaseUrl,
      `INSERT INTO jobs (queue, dedup_key, active_key, status, payload, completed_at)
       SELECT $1, 'old' || i, NULL, 'done', json_build_object('i', i), now() - interval '1 hour'
       FROM generate_series(1, $2::int) AS i`,
      [ctx.queueName, n],
    );
    await query(ctx.databaseUrl, 'VACUUM ANALYZE jobs');
  },

  async pending(ctx) {
    const [row] = await query(
      ctx.databaseUrl,
      `SELECT count(*)::int AS n FROM jobs WHERE queue = $1 AND active_key IS NOT NULL`,
      [ctx.queueName],
    );
    return row.n;
  },

  async completed(ctx) {
    const [row] = await query(
      ctx.databaseUrl,
      `SELECT count(*)::int AS n FROM jobs WHERE queue = $1 AND status = 'done' AND dedup_key NOT LIKE 'old%'`,
      [ctx.queueName],
    );
    return row.n;
  },

  async stored(ctx) {
    const [row] = await query(ctx.databaseUrl, 'SELECT count(*)::int AS n FROM jobs WHERE queue = $1', [ctx.queueName]);
    return row.n;
  },

  // ---- in a child process ----

  async producer(ctx, { mode }) {
    const pool = new Pool({ connectionString: ctx.databaseUrl, max: 16 });
    const insert =
      mode === 'latency'
        ? `WITH inserted AS (
             INSERT INTO jobs (queue, dedup_key, active_key, payload) VALUES ($1, $2, $2, $3)
             ON CONFLICT (queue, active_key) WHERE active_key IS NOT NULL DO NOTHING
             RETURNING queue
           )
           SELECT pg_notify('${CHANNEL}', queue) FROM inserted`
        : `INSERT INTO jobs (queue, dedup_key, active_key, payload) VALUES ($1, $2, $2, $3)
           ON CONFLICT (queue, active_key) WHERE active_key IS NOT NULL DO NOTHING
           RETURNING id`;
    return {
      async enqueue(key, payload) {
        const result = await pool.query({
          name: `enqueue-${mode}`,
          text: insert,
          values: [ctx.queueName, key, payload],
        });
        return result.rowCount === 1;
      },
      close: () => pool.end(),
    };
  },

  async worker(ctx, { concurrency, onJob }) {
    const batch = ctx.options?.batch ?? 32;
    const loops = Math.max(1, Math.floor(concurrency / batch));
    const pool = new Pool({ connectionString: ctx.databaseUrl, max: loops });
    const listenPool = new Pool({ connectionString: ctx.databaseUrl, max: 1 });
    const listen = await listenPool.connect();

    let stopped = false;
    let wakeSeq = 0;
    let wakeUp = [];
    const wake = () => {
      wakeSeq++;
      const waiting = wakeUp;
      wakeUp = [];
      for (const resolve of waiting) resolve();
    };
    listen.on('notification', wake);
    await listen.query(`LISTEN ${CHANNEL}`);
    const poll = setInterval(wake, 1000);

    // Unnamed (re-planned each time): a cached generic plan of the claim degrades to a sequential scan.
    const claimSql = {
      text: `WITH claimable AS (
               SELECT id FROM jobs WHERE queue = $1 AND status = 'queued' ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED
             )
             UPDATE jobs AS j SET status = 'running' FROM claimable WHERE j.id = claimable.id
             RETURNING j.id, j.payload`,
    };
    const completeSql = {
      name: 'complete',
      text: `UPDATE jobs SET status = 'done', active_key = NULL, completed_at = now() WHERE id = ANY($1::uuid[])`,
    };

    const loop = async () => {
      const client = await pool.connect();
      try {
        while (!stopped) {
          const seq = wakeSeq;
          const { rows } = await client.query({ ...claimSql, values: [ctx.queueName, batch] });
          if (rows.length === 0) {
            if (seq === wakeSeq) await new Promise((resolve) => wakeUp.push(resolve));
            continue;
          }
          await Promise.all(rows.map(async (row) => onJob(row.payload)));
          await client.query({ ...completeSql, values: [rows.map((row) => row.id)] });
        }
      } finally {
        client.release();
      }
    };
    const running = Array.from({ length: loops }, loop);

    return {
      async close() {
        stopped = true;
        clearInterval(poll);
        wake();
        await Promise.allSettled(running);
        listen.release();
        await Promise.all([pool.end(), listenPool.end()]);
      },
    };
  },
};
