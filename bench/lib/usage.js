'use strict';
// What a measured window cost: CPU (utime + stime from /proc) of the measured processes and of the store that served
// them (the system's PostgreSQL backends, or redis-server), and the database's transactions (pg_stat_database
// xact_commit + xact_rollback), so that each can be given per job.
const fs = require('node:fs');
const { execFileSync } = require('node:child_process');
const { withClient, query, closePool, queriesSent } = require('./pg');
const { sleep } = require('./stats');

let clockTicks;
function ticksPerSecond() {
  if (clockTicks === undefined) {
    try {
      clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clockTicks = 100;
    }
  }
  return clockTicks;
}

/** utime + stime of a process (all its threads), in seconds; null when it is gone or not readable. */
function cpuSeconds(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond();
  } catch {
    return null;
  }
}

/** The pids of processes whose command name is `name` (e.g. redis-server, pgbouncer). */
function pidsNamed(name) {
  const pids = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (fs.readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === name) pids.push(Number(entry));
    } catch {
      // the process ended while we looked
    }
  }
  return pids;
}

const databaseName = (url) => decodeURIComponent(new URL(url).pathname.slice(1));

/** The client backends connected to the database, except the orchestrator's own. */
async function backendPids(adminUrl, database) {
  return withClient(adminUrl, async (client) =>
    (
      await client.query(
        `SELECT pid FROM pg_stat_activity
         WHERE datname = $1 AND backend_type = 'client backend' AND application_name <> 'bench-orchestrator'`,
        [database],
      )
    ).rows.map((row) => row.pid),
  );
}

/**
 * CPU of the store over a window: backends (or other store processes) seen at the start count from there, those that
 * appear later count whole (they were opened for the measured work).
 */
class StoreCpu {
  constructor({ adminUrl, databaseUrl, extraPids = [] }) {
    this.adminUrl = adminUrl;
    this.database = databaseUrl ? databaseName(databaseUrl) : null;
    this.extraPids = extraPids;
    this.startCpu = new Map();
  }

  async pids() {
    return [...(this.database ? await backendPids(this.adminUrl, this.database) : []), ...this.extraPids];
  }

  async start() {
    for (const pid of await this.pids()) this.startCpu.set(pid, cpuSeconds(pid) ?? 0);
  }

  /** Seconds of CPU since start, of the processes alive now. */
  async stop() {
    let total = 0;
    for (const pid of await this.pids()) {
      const now = cpuSeconds(pid);
      if (now !== null) total += now - (this.startCpu.get(pid) ?? 0);
    }
    return total;
  }
}

/**
 * Transactions ended in a database over a window, less the orchestrator's own statements. Statistics reach
 * pg_stat_database when a backend goes idle (at most once a second) or exits, so the orchestrator's pool for the
 * database is closed around the window and the count is read once it stops moving.
 */
class Transactions {
  constructor({ adminUrl, databaseUrl }) {
    this.adminUrl = adminUrl;
    this.databaseUrl = databaseUrl;
    this.database = databaseName(databaseUrl);
  }

  async read() {
    const [row] = await query(
      this.adminUrl,
      'SELECT (xact_commit + xact_rollback)::float8 AS n, xact_rollback::float8 AS rollbacks FROM pg_stat_database WHERE datname = $1',
      [this.database],
    );
    return row;
  }

  async settled() {
    await closePool(this.databaseUrl);
    let last = await this.read();
    for (let i = 0; i < 30; i++) {
      await sleep(100);
      const next = await this.read();
      if (next.n === last.n) return next;
      last = next;
    }
    return last;
  }

  async start() {
    this.before = await this.settled();
    this.sentBefore = queriesSent(this.databaseUrl);
  }

  /** Call once the measured processes have exited. */
  async stop() {
    const own = queriesSent(this.databaseUrl) - this.sentBefore;
    const after = await this.settled();
    return { transactions: after.n - this.before.n - own, rollbacks: after.rollbacks - this.before.rollbacks };
  }
}

module.exports = { cpuSeconds, pidsNamed, StoreCpu, Transactions, backendPids };
