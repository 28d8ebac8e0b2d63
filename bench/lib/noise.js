'use strict';
// Other work on the same machine and the same PostgreSQL server skews the numbers (other engineers' test suites
// share them). This samples, every 500 ms, how many PostgreSQL client backends outside the bench_* databases are
// active, and the load average, so each measurement can say how quiet the machine was while it ran.
const fs = require('node:fs');
const { Client } = require('pg');
const { RUN_LOCK_APP } = require('./pg');

class NoiseMonitor {
  constructor(adminUrl) {
    this.adminUrl = adminUrl;
    this.samples = [];
  }

  async start() {
    this.client = new Client({ connectionString: this.adminUrl, application_name: 'bench-noise-monitor' });
    this.client.on('error', () => {});
    await this.client.connect();
    this.timer = setInterval(() => void this.sample(), 500);
    this.timer.unref();
  }

  async sample() {
    if (this.busy) return;
    this.busy = true;
    try {
      const { rows } = await this.client.query(
        `SELECT count(*) FILTER (WHERE state = 'active')::int AS active, count(*)::int AS connections
         FROM pg_stat_activity
         WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
           AND datname IS DISTINCT FROM NULL AND datname NOT LIKE 'bench\\_%' AND application_name <> $1`,
        [RUN_LOCK_APP],
      );
      const load = Number(fs.readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
      this.samples.push({ t: Date.now(), active: rows[0].active, connections: rows[0].connections, load });
    } catch {
      // a full server (too many clients) is itself noise; nothing to record
    } finally {
      this.busy = false;
    }
  }

  mark() {
    return Date.now();
  }

  /**
   * Waits (at most `maxMs`) until no foreign backend is active and the server has room for our connections, so a
   * measurement does not start in the middle of someone else's test run. Returns how long it waited.
   */
  async waitForQuiet(maxMs, maxConnections) {
    const start = Date.now();
    while (Date.now() - start < maxMs) {
      await this.sample();
      const last = this.samples[this.samples.length - 1];
      if (last && last.t >= start && last.active === 0 && last.connections < maxConnections) break;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    return Date.now() - start;
  }

  /** What was seen between `from` and now. */
  since(from) {
    const window = this.samples.filter((s) => s.t >= from);
    if (window.length === 0) return null;
    const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
    return {
      foreignActiveMean: Number(mean(window.map((s) => s.active)).toFixed(2)),
      foreignConnectionsMax: Math.max(...window.map((s) => s.connections)),
      loadMean: Number(mean(window.map((s) => s.load)).toFixed(2)),
    };
  }

  async stop() {
    clearInterval(this.timer);
    await this.client.end().catch(() => {});
  }
}

module.exports = { NoiseMonitor };
