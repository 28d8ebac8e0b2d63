'use strict';
/*
 * DBOS Transact for TypeScript 5.x (`@dbos-inc/dbos-sdk`, https://docs.dbos.dev), Postgres system database.
 *
 * Deduplication: queue enqueue with `deduplicationID`; a duplicate throws `DBOSQueueDuplicatedError`.
 * Producers use `DBOSClient.enqueue({ queueName, workflowName, deduplicationID }, payload)`, the documented way to
 * enqueue from a process that does not run workflows (W1 has no workers). DBOS has no bulk enqueue, so the prefill
 * enqueues one workflow through the same client and copies its rows in SQL (lib/clone.js).
 *
 * Worker: `DBOS.registerWorkflow(noop, { name })`, `DBOS.launch()`, then `DBOS.registerQueue(name,
 * { workerConcurrency: 32, minPollingIntervalMs: 10 })`. DBOS queues are dispatched by polling: at the default
 * 1 s interval a worker takes at most `workerConcurrency` workflows a second (~30/s here), so the interval is set to
 * 10 ms. DBOS documents no recommended low-latency value; 10 ms is what it takes for DBOS not to be measured at its
 * polling floor (it is the setting that gives DBOS its throughput and latency in this table). Everything else at its defaults; logging at 'error'.
 */
const { query } = require('../lib/pg');
const { cloneTemplateRow } = require('../lib/clone');

const APP = 'bench';
const WORKFLOW = 'noop';
const STATUS = 'dbos.workflow_status';
const QUEUE_SETTINGS = { workerConcurrency: 32, minPollingIntervalMs: 10 };

let onJob = () => {};

async function launch(ctx) {
  const { DBOS } = require('@dbos-inc/dbos-sdk');
  DBOS.setConfig({ name: APP, systemDatabaseUrl: ctx.databaseUrl, logLevel: 'error' });
  DBOS.registerWorkflow(async (payload) => onJob(payload), { name: WORKFLOW });
  await DBOS.launch();
  await DBOS.registerQueue(ctx.queueName, { ...QUEUE_SETTINGS, onConflict: 'always_update' });
  return DBOS;
}

module.exports = {
  id: 'dbos',
  label: 'DBOS 5',
  backend: 'postgres',
  settings: 'deduplicationID via DBOSClient; workerConcurrency 32, minPollingIntervalMs 10',
  w4: 'not run (time budget)',

  async install(ctx) {
    const DBOS = await launch(ctx);
    await DBOS.shutdown();
  },

  async reset(ctx) {
    await query(ctx.databaseUrl, `TRUNCATE ${STATUS}, dbos.workflow_input, dbos.workflow_output CASCADE`);
  },

  /**
   * DBOS has no bulk enqueue: one workflow through DBOSClient, then n-1 SQL copies of what it wrote (its status row
   * and its input row; see lib/clone.js).
   */
  async prefill(ctx, n) {
    const { runRole } = require('../lib/proc');
    const prefix = `p${Date.now()}-`;
    await runRole(
      { module: 'dbos', ctx, role: 'enqueue-many', args: { n: 1, producers: 1, keyPrefix: prefix } },
      60_000,
    );
    const [template] = await query(ctx.databaseUrl, `SELECT workflow_uuid FROM ${STATUS} WHERE deduplication_id = $1`, [
      `${prefix}0`,
    ]);
    const id = `'${prefix}' || i`;
    await cloneTemplateRow(ctx.databaseUrl, STATUS, 't.workflow_uuid = $1', [template.workflow_uuid], n, {
      workflow_uuid: id,
      deduplication_id: id,
    });
    await cloneTemplateRow(
      ctx.databaseUrl,
      'dbos.workflow_input',
      't.workflow_uuid = $1',
      [template.workflow_uuid],
      n,
      {
        workflow_uuid: id,
      },
    );
  },

  async pending(ctx) {
    const [row] = await query(
      ctx.databaseUrl,
      `SELECT count(*)::int AS n FROM ${STATUS} WHERE queue_name = $1 AND status IN ('ENQUEUED', 'PENDING')`,
      [ctx.queueName],
    );
    return row.n;
  },

  async completed(ctx) {
    const [row] = await query(
      ctx.databaseUrl,
      `SELECT count(*)::int AS n FROM ${STATUS} WHERE queue_name = $1 AND status = 'SUCCESS'`,
      [ctx.queueName],
    );
    return row.n;
  },

  async stored(ctx) {
    const [row] = await query(ctx.databaseUrl, `SELECT count(*)::int AS n FROM ${STATUS} WHERE queue_name = $1`, [
      ctx.queueName,
    ]);
    return row.n;
  },

  // ---- in a child process ----

  async producer(ctx) {
    const sdk = require('@dbos-inc/dbos-sdk');
    const { DBOSClient } = sdk;
    const { DBOSQueueDuplicatedError } = sdk.Error;
    const client = await DBOSClient.create({ systemDatabaseUrl: ctx.databaseUrl, applicationName: APP });
    return {
      async enqueue(key, payload) {
        try {
          await client.enqueue({ queueName: ctx.queueName, workflowName: WORKFLOW, deduplicationID: key }, payload);
          return true;
        } catch (error) {
          if (error instanceof DBOSQueueDuplicatedError) return false;
          throw error;
        }
      },
      close: () => client.destroy(),
    };
  },

  async worker(ctx, hooks) {
    onJob = hooks.onJob;
    const DBOS = await launch(ctx);
    return { close: () => DBOS.shutdown() };
  },
};
