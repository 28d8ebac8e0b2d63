'use strict';
/*
 * The soak (npm run bench -- --soak): SOAK_MINUTES (default 30) of two application processes enqueueing at a steady
 * rate (SOAK_RATE per process per second, default 20) into one queue they both drain, on a PostgreSQL server of its
 * own (the Debian PostgreSQL 15 binaries, run as the `postgres` OS user, fsync on) that is restarted with
 * `pg_ctl stop -m immediate` every SOAK_RESTART_MINUTES (default 5) and whose client backends are killed with
 * pg_terminate_backend every SOAK_KILL_SECONDS (default 60).
 *
 * Checks at the end: every accepted workflow ended SUCCESS, each body ran exactly once, no process died or had an
 * uncaught exception; reports refusals by error, worker RSS over time, and the time from each restart to the first
 * completed workflow. Writes bench/results/soak-<time>.json and soak-latest.md.
 */
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const net = require('node:net');
const { execFileSync, fork } = require('node:child_process');
const { RESULTS_DIR, LIBRARY_DIST } = require('./lib/config');

const PG_BIN = '/usr/lib/postgresql/15/bin';
const minutes = Number(process.env.SOAK_MINUTES || 30);
const restartEveryMs = Number(process.env.SOAK_RESTART_MINUTES || 5) * 60_000;
const killEveryMs = Number(process.env.SOAK_KILL_SECONDS || 60) * 1000;
const rate = Number(process.env.SOAK_RATE || 20);
const log = (message) => process.stderr.write(`[soak ${new Date().toISOString().slice(11, 19)}] ${message}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** A PostgreSQL 15 server of the soak's own. */
class OwnServer {
  constructor(dir, port) {
    this.dir = dir;
    this.port = port;
    this.url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  }
  static async create() {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'soak-pg-'));
    execFileSync('chown', ['postgres:postgres', dir]);
    const server = new OwnServer(dir, await freePort());
    server.asPostgres('initdb', ['-D', path.join(dir, 'data'), '-U', 'postgres', '--auth=trust', '--no-instructions']);
    server.start();
    return server;
  }
  asPostgres(binary, args) {
    return execFileSync('runuser', ['-u', 'postgres', '--', path.join(PG_BIN, binary), ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  }
  start() {
    const options = `-p ${this.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=${this.dir} -c max_connections=200`;
    this.asPostgres('pg_ctl', [
      '-D',
      path.join(this.dir, 'data'),
      '-l',
      path.join(this.dir, 'log'),
      '-o',
      options,
      '-w',
      'start',
    ]);
  }
  stop(mode) {
    this.asPostgres('pg_ctl', ['-D', path.join(this.dir, 'data'), '-m', mode, '-w', 'stop']);
  }
  remove() {
    try {
      this.stop('immediate');
    } catch {
      // Already stopped.
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

async function main() {
  if (!fs.existsSync(path.join(PG_BIN, 'pg_ctl')))
    throw new Error(`the soak needs the PostgreSQL 15 binaries in ${PG_BIN} (apt-get install -y postgresql-15)`);
  if (!fs.existsSync(path.join(LIBRARY_DIST, 'index.js'))) throw new Error('build the library first: npm run build');
  const { Pool } = require(require.resolve('pg', { paths: [LIBRARY_DIST] }));
  const server = await OwnServer.create();
  const pool = new Pool({ connectionString: server.url, max: 2 });
  pool.on('error', () => undefined);
  const state = {
    accepted: new Set(),
    refused: {},
    runs: new Map(),
    rss: {},
    uncaught: [],
    exits: [],
    completions: [],
  };
  const apps = ['a', 'b'].map((name) => {
    const child = fork(path.join(__dirname, 'soak-app.js'), [], {
      env: { ...process.env, SOAK_NAME: name, SOAK_RATE: String(rate), SOAK_DATABASE_URL: server.url },
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    });
    const lines = [];
    const keep = (chunk) => lines.push(...chunk.toString().split('\n').filter(Boolean));
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.on('message', (message) => {
      if (message.type === 'accepted' && message.created) state.accepted.add(message.id);
      if (message.type === 'refused') state.refused[message.error] = (state.refused[message.error] ?? 0) + 1;
      if (message.type === 'ran') {
        state.runs.set(message.id, (state.runs.get(message.id) ?? 0) + 1);
        state.completions.push(message.at);
      }
      if (message.type === 'rss') (state.rss[name] ??= []).push({ at: message.at, rss: message.rss });
      if (message.type === 'uncaught') state.uncaught.push({ name, error: message.error });
    });
    child.on('exit', (code, signal) => state.exits.push({ name, code, signal }));
    return {
      name,
      child,
      lines,
      ready: new Promise((resolve) => child.on('message', (m) => m.type === 'ready' && resolve())),
    };
  });
  await Promise.all(apps.map((app) => app.ready));
  log(`server on port ${server.port}; two apps enqueueing ${rate}/s each for ${minutes} min`);

  const started = Date.now();
  const end = started + minutes * 60_000;
  const restarts = [];
  let nextRestart = started + restartEveryMs;
  let nextKill = started + killEveryMs;
  let kills = 0;
  while (Date.now() < end) {
    await sleep(500);
    if (Date.now() >= nextRestart) {
      nextRestart += restartEveryMs;
      const at = Date.now();
      server.stop('immediate');
      await sleep(2000);
      server.start();
      restarts.push({ stoppedAt: at, startedAt: Date.now() });
      log(`restarted the server (down ${Date.now() - at} ms)`);
    } else if (Date.now() >= nextKill) {
      nextKill += killEveryMs;
      const { rowCount } = await pool
        .query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'nest-dedup-queue'")
        .catch(() => ({ rowCount: 0 }));
      kills += rowCount ?? 0;
    }
  }
  apps.forEach((app) => app.child.send({ type: 'stop-enqueueing' }));
  await sleep(3000);
  const drainDeadline = Date.now() + 120_000;
  let unfinished = [];
  while (Date.now() < drainDeadline) {
    const { rows } = await pool
      .query("SELECT workflow_id, status FROM dedup_queue.workflows WHERE status <> 'SUCCESS'")
      .catch(() => ({ rows: [{ workflow_id: '(query failed)', status: '?' }] }));
    unfinished = rows;
    if (rows.length === 0) break;
    await sleep(1000);
  }
  const { rows: finished } = await pool.query("SELECT workflow_id FROM dedup_queue.workflows WHERE status = 'SUCCESS'");
  const succeeded = new Set(finished.map((row) => row.workflow_id));
  apps.forEach((app) => app.child.connected && app.child.send({ type: 'exit' }));
  await sleep(5000);
  await pool.end();
  server.remove();

  const notSucceeded = [...state.accepted].filter((id) => !succeeded.has(id));
  const ranTwice = [...state.runs].filter(([, count]) => count > 1).map(([id]) => id);
  const neverRan = [...succeeded].filter((id) => !state.runs.has(id));
  const firstCompletionAfter = restarts.map(({ startedAt }) => {
    const first = state.completions.filter((at) => at >= startedAt).sort((a, b) => a - b)[0];
    return first === undefined ? null : first - startedAt;
  });
  const rssMiB = Object.fromEntries(
    Object.entries(state.rss).map(([name, samples]) => {
      const mib = samples.map((sample) => Math.round((sample.rss / 2 ** 20) * 10) / 10);
      const tenth = Math.max(1, Math.floor(mib.length / 10));
      const avg = (list) => Math.round((list.reduce((a, b) => a + b, 0) / list.length) * 10) / 10;
      return [name, { first: avg(mib.slice(0, tenth)), last: avg(mib.slice(-tenth)), max: Math.max(...mib) }];
    }),
  );
  const result = {
    startedAt: new Date(started).toISOString(),
    minutes,
    ratePerProcess: rate,
    restarts: restarts.length,
    backendKills: kills,
    accepted: state.accepted.size,
    succeeded: succeeded.size,
    notSucceeded: notSucceeded.length,
    unfinishedAtEnd: unfinished.length,
    ranTwice: ranTwice.length,
    succeededButNeverRan: neverRan.length,
    refusedByError: state.refused,
    restartToFirstCompletionMs: firstCompletionAfter,
    rssMiB,
    uncaught: state.uncaught.length,
    unexpectedExits: state.exits.filter((exit) => exit.code !== 0).length,
  };
  result.passed =
    result.notSucceeded === 0 &&
    result.ranTwice === 0 &&
    result.uncaught === 0 &&
    result.unexpectedExits === 0 &&
    result.accepted > 0;
  fs.mkdirSync(RESULTS_DIR, { recursive: true });
  const file = path.join(RESULTS_DIR, `soak-${result.startedAt.replace(/[:.]/g, '-')}.json`);
  fs.writeFileSync(
    file,
    `${JSON.stringify({ ...result, notSucceededIds: notSucceeded.slice(0, 20), uncaughtErrors: state.uncaught.slice(0, 5) }, null, 2)}\n`,
  );
  fs.writeFileSync(path.join(RESULTS_DIR, 'soak-latest.md'), soakTable(result));
  console.log(soakTable(result));
  log(`wrote ${path.relative(process.cwd(), file)}`);
  if (!result.passed) {
    for (const app of apps) log(`--- ${app.name} (last lines)\n${app.lines.slice(-30).join('\n')}`);
    process.exitCode = 1;
  }
}

function soakTable(r) {
  const rss = Object.entries(r.rssMiB)
    .map(([name, m]) => `${name}: ${m.first} → ${m.last} MiB (max ${m.max})`)
    .join('; ');
  return [
    `| soak (${r.startedAt}) | |`,
    '|---|---|',
    `| duration, load | ${r.minutes} min, 2 processes × ${r.ratePerProcess} enqueues/s |`,
    `| disturbances | ${r.restarts} restarts (pg_ctl stop -m immediate), ${r.backendKills} backends terminated |`,
    `| accepted enqueues; not SUCCESS at the end | ${r.accepted}; ${r.notSucceeded} |`,
    `| bodies run twice | ${r.ranTwice} |`,
    `| refused enqueues | ${
      Object.entries(r.refusedByError)
        .map(([name, n]) => `${name} ${n}`)
        .join(', ') || 'none'
    } |`,
    `| restart → first completed workflow | ${r.restartToFirstCompletionMs.map((ms) => (ms === null ? '-' : `${ms} ms`)).join(', ')} |`,
    `| worker RSS (first → last tenth) | ${rss} |`,
    `| uncaught exceptions, crashed processes | ${r.uncaught}, ${r.unexpectedExits} |`,
    `| verdict | ${r.passed ? 'passed' : 'FAILED'} |`,
    '',
  ].join('\n');
}

module.exports = { main };
if (require.main === module) {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
