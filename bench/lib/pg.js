'use strict';
// Small helpers around node-postgres for the orchestrator: per-system databases and one-off queries.
const { Client, Pool } = require('pg');

function withDatabase(url, database) {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

async function withClient(url, work) {
  const client = new Client({ connectionString: url, application_name: 'bench-orchestrator' });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/** Drops and recreates `bench_<id>`; returns its URL. */
async function recreateDatabase(adminUrl, id) {
  const name = `bench_${id.replace(/[^a-z0-9]+/gi, '_').toLowerCase()}`;
  await withClient(adminUrl, async (client) => {
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await client.query(`CREATE DATABASE ${name}`);
  });
  return withDatabase(adminUrl, name);
}

/** A tiny pool per database, shared by the orchestrator's checks (counts, resets, seeding). */
const pools = new Map();
function pool(url) {
  let p = pools.get(url);
  if (!p) {
    p = new Pool({ connectionString: url, max: 2, application_name: 'bench-orchestrator' });
    p.on('error', () => {});
    pools.set(url, p);
  }
  return p;
}
const sent = new Map();
async function query(url, sql, params) {
  sent.set(url, (sent.get(url) || 0) + 1);
  return (await pool(url).query(sql, params)).rows;
}
/** How many statements the orchestrator sent to a database (each its own transaction). */
const queriesSent = (url) => sent.get(url) || 0;
/** Ends the orchestrator's pool for a database (its backends exit, which flushes their statistics). */
async function closePool(url) {
  const p = pools.get(url);
  if (!p) return;
  pools.delete(url);
  await p.end().catch(() => {});
}
async function closePools() {
  await Promise.all([...pools.values()].map((p) => p.end().catch(() => {})));
  pools.clear();
}

/** The advisory lock a bench run holds on its server (in the admin URL's database) for as long as it runs. */
const RUN_LOCK = 'nest-dedup-queue bench run';
const RUN_LOCK_APP = 'bench-run-lock';

/**
 * Waits until no other bench run uses this server, then holds it until `release()` (or this process exits): two runs
 * on one server would drop and recreate each other's bench_* databases (and flush the same Redis db) mid-measurement,
 * which the other sees as lost or stray jobs.
 */
async function holdServer(adminUrl, log) {
  const client = new Client({ connectionString: adminUrl, application_name: RUN_LOCK_APP });
  client.on('error', () => {});
  await client.connect();
  for (let waited = false; ; waited = true) {
    const [{ held }] = (await client.query('SELECT pg_try_advisory_lock(hashtext($1)) AS held', [RUN_LOCK])).rows;
    if (held) break;
    if (!waited) {
      const holders = await client.query(
        `SELECT a.pid, a.backend_start FROM pg_locks l JOIN pg_stat_activity a USING (pid)
         WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1 AND a.pid <> pg_backend_pid()`,
        [RUN_LOCK_APP],
      );
      const who = holders.rows.map((r) => `backend ${r.pid} since ${r.backend_start.toISOString()}`).join(', ');
      log(`another bench run uses this server (${who || 'unknown'}); waiting for it to end`);
    }
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
  return { release: () => client.end().catch(() => {}) };
}

module.exports = {
  RUN_LOCK_APP,
  holdServer,
  withDatabase,
  withClient,
  recreateDatabase,
  query,
  pool,
  closePool,
  closePools,
  queriesSent,
};
