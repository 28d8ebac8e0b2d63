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
async function query(url, sql, params) {
  return (await pool(url).query(sql, params)).rows;
}
async function closePools() {
  await Promise.all([...pools.values()].map((p) => p.end().catch(() => {})));
  pools.clear();
}

module.exports = { withDatabase, withClient, recreateDatabase, query, pool, closePools };
