#!/usr/bin/env node
'use strict';
// `node bench/storage/claim-commit.js`: the round trip of a one-row claim (UPDATE … FOR UPDATE SKIP LOCKED), with
// and without `set_config('synchronous_commit', 'off', true)` in its statement (as the module's claim has it),
// 1,000 of each, interleaved, on a scratch database (bench_claim_commit, dropped at the end): what a lone claim
// saves by not waiting for the disk.
const { adminUrl, LIBRARY_DIST } = require('../lib/config');
const { withDatabase } = require('../lib/pg');
const { Client } = require(require.resolve('pg', { paths: [LIBRARY_DIST] }));

(async () => {
  const admin = new Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query('DROP DATABASE IF EXISTS bench_claim_commit');
  await admin.query('CREATE DATABASE bench_claim_commit');
  const c = new Client({ connectionString: withDatabase(adminUrl, 'bench_claim_commit') });
  await c.connect();
  await c.query(
    `CREATE TABLE q (id bigserial PRIMARY KEY, queue_name text NOT NULL, status text NOT NULL, executor_id text)`,
  );
  await c.query(`CREATE INDEX q_ready ON q (queue_name, id) WHERE status = 'ENQUEUED'`);
  const N = 1000;
  await c.query(`INSERT INTO q (queue_name, status) SELECT 'a', 'ENQUEUED' FROM generate_series(1, $1)`, [2 * N]);
  await c.query('ANALYZE q');
  const claim = (async_) => ({
    name: async_ ? 'claim_async' : 'claim_sync',
    text: `WITH claimable AS (SELECT id FROM q WHERE queue_name = $1 AND status = 'ENQUEUED' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
           ${async_ ? ", nf AS (SELECT set_config('synchronous_commit', 'off', true))" : ''}
           UPDATE q SET status = 'PENDING', executor_id = $2 FROM claimable WHERE q.id = claimable.id
           ${async_ ? 'AND EXISTS (SELECT 1 FROM nf)' : ''} RETURNING q.id`,
    values: ['a', 'x'],
  });
  const times = { sync: [], async: [] };
  for (let i = 0; i < N; i++) {
    for (const kind of i % 2 ? ['sync', 'async'] : ['async', 'sync']) {
      const t0 = process.hrtime.bigint();
      const { rowCount } = await c.query(claim(kind === 'async'));
      times[kind].push(Number(process.hrtime.bigint() - t0) / 1e6);
      if (rowCount !== 1) throw new Error('nothing claimed');
    }
  }
  const pct = (xs, p) => {
    const v = [...xs].sort((a, b) => a - b);
    return v[Math.floor((v.length - 1) * p)];
  };
  for (const kind of ['sync', 'async'])
    console.log(
      `${kind}: p50 ${pct(times[kind], 0.5).toFixed(3)} ms, p90 ${pct(times[kind], 0.9).toFixed(3)} ms, mean ${(times[kind].reduce((a, b) => a + b, 0) / N).toFixed(3)} ms`,
    );
  await c.end();
  await admin.query('DROP DATABASE bench_claim_commit');
  await admin.end();
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
