#!/usr/bin/env node
'use strict';
/*
 * Where a drain's database time goes, statement by statement: `node bench/storage/study/explain.js [candidate ...]`
 * (default: p0-library-sql b-ready-apart c-written-once). On a server of the study's own, for each candidate: install
 * it, enqueue 200 workflows, claim 32 with its claim, then EXPLAIN (ANALYZE, BUFFERS) its outcome statement for
 * those 32 with the next claim of 32 attached (as the worker sends it), planned for its values and planned generically
 * (once for all values), in a transaction that is rolled back. The plans' per-node times say which part of the
 * statement costs what, and what a generic plan would cost. A diagnostic, not part of `--storage`.
 */
const { Pool } = require('pg');
const { startStudyServer } = require('./server');
const { CANDIDATES, UUIDV7_SQL } = require('./candidates');
const { withDatabase } = require('../../lib/pg');

/** The queued workflows when the statement runs (EXPLAIN_BACKLOG): the plans depend on the tables' sizes. */
const BACKLOG = Number(process.env.EXPLAIN_BACKLOG ?? 20_000);
const SELECTED = process.argv.slice(2).length
  ? process.argv.slice(2)
  : ['p0-library-sql', 'b-ready-apart', 'c-written-once'];

/** A value as an SQL literal, for EXECUTE's arguments. */
function literal(client, value) {
  if (value === null || value === undefined) return 'NULL';
  if (Array.isArray(value)) {
    // NOTE: an array as a quoted literal of unknown type, which takes the parameter's type (ARRAY[NULL] would be text[]).
    const element = (v) => (v === null || v === undefined ? 'NULL' : `"${String(v).replace(/[\\"]/g, '\\$&')}"`);
    return client.escapeLiteral(`{${value.map(element).join(',')}}`);
  }
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (value instanceof Date) return `${client.escapeLiteral(value.toISOString())}::timestamptz`;
  return client.escapeLiteral(String(value));
}

/**
 * A client that EXPLAINs the statements it is given instead of running them (and answers with no rows): prepared,
 * then executed with the plan the server chooses for `mode` (force_custom_plan: planned for these values, as at each
 * execution the server re-plans it; force_generic_plan: the plan made once), in a transaction rolled back.
 */
function explaining(client, plans, mode) {
  return {
    async query(config, values) {
      const text = typeof config === 'string' ? config : config.text;
      const params = (typeof config === 'string' ? values : config.values) ?? [];
      await client.query('BEGIN');
      try {
        await client.query(`SET LOCAL plan_cache_mode = ${mode}`);
        await client.query(`PREPARE explained AS ${text}`);
        const args = params.length ? `(${params.map((v) => literal(client, v)).join(', ')})` : '';
        const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE explained${args}`);
        plans.push(rows.map((row) => row['QUERY PLAN']).join('\n'));
      } finally {
        await client.query('ROLLBACK');
        await client.query('DEALLOCATE ALL');
      }
      return { rows: [] };
    },
  };
}

(async () => {
  const server = await startStudyServer();
  const admin = new Pool({ connectionString: server.url, max: 1 });
  admin.on('error', () => {});
  try {
    for (const id of SELECTED) {
      const name = `explain_${id.replace(/\W/g, '_')}`;
      await admin.query(`CREATE DATABASE ${name}`);
      const url = withDatabase(server.url, name);
      const pool = new Pool({ connectionString: url, max: 2 });
      pool.on('error', () => {});
      const db = { url, query: (sql, params) => pool.query(sql, params) };
      await db.query(UUIDV7_SQL);
      const candidate = CANDIDATES[id]();
      console.error(`${id}: install`);
      await candidate.install(db, 1000);
      const parts = candidate.parts ?? candidate;
      const client = await pool.connect();
      client.on('error', (error) => console.error(`${id}: ${error.message}`));
      for (let at = 0; at < BACKLOG; at += 1000) {
        await parts.enqueueBatch(
          client,
          Array.from({ length: 1000 }, (_, n) => `k${at + n}`),
          0,
        );
      }
      await client.query('ANALYZE');
      const worker = parts.worker();
      await worker.setup(client);
      // Warm the caches and the plan cache as a running worker has them.
      for (let i = 0; i < 2; i++) {
        const claimed = await worker.claim(client, 32);
        await worker.finish(client, claimed, 0);
      }
      const claimed = await worker.claim(client, 32);
      for (const mode of ['force_custom_plan', 'force_generic_plan']) {
        const plans = [];
        await worker.finish(explaining(client, plans, mode), claimed, 32);
        console.log(`\n=== ${candidate.label}: the outcome statement, 32 outcomes and a claim of 32, ${mode} ===`);
        console.log(plans.join('\n'));
      }
      client.release();
      await pool.end();
    }
  } finally {
    await admin.end();
    await server.dispose();
  }
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
