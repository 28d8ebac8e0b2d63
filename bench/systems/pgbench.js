'use strict';
/*
 * pgbench: W1's statement sent from C, the database's own limit for the storm (issue 32's "W1 ≥ 0.8× pgbench").
 *
 * The table and statement are raw SQL's (systems/raw-sql.js): one single-row `INSERT … ON CONFLICT (queue,
 * active_key) WHERE active_key IS NOT NULL DO NOTHING RETURNING id` per call, autocommit, prepared (`-M prepared`, as
 * node-postgres' named statements), 16 clients in one thread (`-c 16 -j 1`, as W1's 16 producers in one process).
 * The keys are W1's: each client numbers its own calls (a variable kept from one transaction to the next), and
 * `permute` shuffles the call numbers, so every key is called exactly calls/keys times in a shuffled order. pgbench
 * reports no per-call outcome: the calls accepted are the rows stored after the storm. The producer's CPU is
 * pgbench's (the shell's children's times once it has exited).
 */
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const rawSql = require('./raw-sql');
const { query } = require('../lib/pg');

/** The pgbench on PATH, else PostgreSQL 15's on Debian; null when neither runs. Looked up once per process. */
let binary;
function pgbenchBinary() {
  if (binary === undefined) {
    const runs = (candidate) => spawnSync(candidate, ['--version'], { stdio: 'ignore' }).status === 0;
    binary = ['pgbench', '/usr/lib/postgresql/15/bin/pgbench'].find(runs) ?? null;
  }
  return binary;
}

/** The kernel's clock ticks per second, in which /proc reports CPU times. */
let clockTicks;
function clockTicksPerSecond() {
  clockTicks ??= Number(spawnSync('getconf', ['CLK_TCK']).stdout.toString().trim()) || 100;
  return clockTicks;
}

const SCRIPT = `\\set n :n + 1
\\set k permute(:client_id * :per_client + :n - 1, :calls) % :keys
INSERT INTO jobs (queue, dedup_key, active_key, payload) VALUES (:queue, 'key-' || :k, 'key-' || :k, '{}')
  ON CONFLICT (queue, active_key) WHERE active_key IS NOT NULL DO NOTHING RETURNING id;
`;

module.exports = {
  id: 'pgbench',
  label: "pgbench (W1's statement from C)",
  backend: 'postgres',
  settings: "raw SQL's single-row INSERT … ON CONFLICT DO NOTHING, prepared, 16 clients in one thread (W1 only)",
  available: () => pgbenchBinary() !== null,

  install: rawSql.install,
  reset: rawSql.reset,
  stored: rawSql.stored,

  // ---- in a child process ----

  /** W1 in one pgbench run: the same calls, keys and clients as the other systems' storm. */
  async storm(ctx, { calls, keys, producers, maxSeconds }) {
    if (calls % producers !== 0)
      throw new Error(`pgbench storm: ${calls} calls do not split over ${producers} clients`);
    const perClient = calls / producers;
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-pgbench-'));
    const script = path.join(dir, 'w1.sql');
    fs.writeFileSync(script, SCRIPT);
    const variables = { n: 0, per_client: perClient, calls, keys, queue: ctx.queueName };
    const args = [
      ...Object.entries(variables).flatMap(([name, value]) => ['-D', `${name}=${value}`]),
      ...['-n', '-M', 'prepared', '-c', producers, '-j', 1, '-t', perClient, '-f', script, ctx.databaseUrl],
    ].map(String);
    // The shell reports its children's CPU (utime + stime, in clock ticks) once pgbench has exited.
    const shell = `"$0" "$@"; status=$?; echo "children-cpu $(cut -d' ' -f16,17 /proc/$$/stat)"; exit $status`;
    const { status, stdout, stderr } = await new Promise((resolve) => {
      const child = spawn('sh', ['-c', shell, pgbenchBinary(), ...args], { timeout: (maxSeconds + 60) * 1000 });
      let out = '';
      let err = '';
      child.stdout.on('data', (chunk) => (out += chunk));
      child.stderr.on('data', (chunk) => (err += chunk));
      child.on('close', (code) => resolve({ status: code, stdout: out, stderr: err }));
    });
    fs.rmSync(dir, { recursive: true, force: true });
    const processed = Number((stdout.match(/number of transactions actually processed: (\d+)/) || [])[1] ?? 0);
    const tps = Number((stdout.match(/tps = ([\d.]+) \(without initial connection time\)/) || [])[1] ?? 0);
    const [ticksUser, ticksSystem] = (stdout.match(/children-cpu (\d+) (\d+)/) || []).slice(1).map(Number);
    const [{ n: accepted }] = await query(ctx.databaseUrl, 'SELECT count(*)::int AS n FROM jobs WHERE queue = $1', [
      ctx.queueName,
    ]);
    const errors = status === 0 ? calls - processed : calls;
    return {
      calls: processed,
      accepted,
      errors,
      firstError: errors ? stderr.trim().split('\n').pop() || `pgbench exited with ${status}` : undefined,
      elapsedNs: tps ? (processed / tps) * 1e9 : 0,
      perSecond: tps,
      cpuSeconds: ((ticksUser ?? 0) + (ticksSystem ?? 0)) / clockTicksPerSecond(),
    };
  },
};
