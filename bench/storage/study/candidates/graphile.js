'use strict';
/*
 * graphile-worker 0.17 on its own tables, driven by itself (the bench's install): `addJobs` with a `jobKey` per job
 * in batches of 1,000 (its bulk path; `jobKey` is its deduplication), and `run()` with the bench's settings
 * (concurrency 32, localQueue 33, completeJobBatchDelay 0). It deletes a finished job and keeps no history.
 */
const { Client } = require('pg');
const { argumentsOf } = require('./prototype-common');

const JOBS = 'graphile_worker._private_jobs';
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function quietLogger() {
  const { Logger } = require('graphile-worker');
  return new Logger(() => (level, message) => {
    if (level === 'error') console.error(`graphile-worker: ${message}`);
  });
}

module.exports = {
  id: 'graphile-worker',
  label: 'graphile-worker 0.17 (its own tables)',

  async install(db) {
    const { runMigrations } = require('graphile-worker');
    await runMigrations({ connectionString: db.url, logger: quietLogger() });
  },

  async enqueue({ url, jobs, keyPrefix, inputBytes }) {
    const { makeWorkerUtils } = require('graphile-worker');
    const utils = await makeWorkerUtils({ connectionString: url, logger: quietLogger() });
    const cpuAtStart = process.cpuUsage();
    const started = performance.now();
    for (let at = 0; at < jobs; at += 1000) {
      const specs = Array.from({ length: Math.min(1000, jobs - at) }, (_, n) => ({
        identifier: 'noop',
        payload: argumentsOf(`${keyPrefix}${at + n}`, inputBytes),
        jobKey: `${keyPrefix}${at + n}`,
      }));
      await utils.addJobs(specs);
    }
    return { seconds: (performance.now() - started) / 1000, cpuAtStart, close: () => utils.release() };
  },

  async drain({ url, jobs }) {
    const { run } = require('graphile-worker');
    let done = 0;
    let firstAt;
    let allRan;
    const ran = new Promise((resolve) => (allRan = resolve));
    const runner = await run({
      connectionString: url,
      concurrency: 32,
      maxPoolSize: 34,
      noHandleSignals: true,
      logger: quietLogger(),
      taskList: {
        noop: async () => {
          firstAt ??= performance.now();
          if (++done === jobs) allRan();
        },
      },
      preset: { worker: { localQueue: { size: 33 }, completeJobBatchDelay: 0 } },
    });
    const cpuAtStart = process.cpuUsage();
    await ran;
    const client = new Client({ connectionString: url, application_name: 'bench-orchestrator' });
    await client.connect();
    for (;;) {
      const { rows } = await client.query(`SELECT count(*)::int AS n FROM ${JOBS}`);
      if (rows[0].n === 0) break;
      await sleep(20);
    }
    await client.end();
    return { seconds: (performance.now() - firstAt) / 1000, cpuAtStart, close: () => runner.stop() };
  },
};
