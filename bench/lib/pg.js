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

module.exports = { withDatabase, withClient, recreateDatabase, query, pool, closePool, closePools, queriesSent };
