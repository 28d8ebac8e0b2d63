'use strict';
/*
 * The module itself (this repository's build, packages/nest-dedup-queue/dist), in three forms:
 *  - `1.0`: as it is. Enqueue: `QueueService.enqueueMany` in batches of 1,000; drain: one worker process (this child),
 *    `workerConcurrency: 32`, everything else the module's defaults.
 *  - `A`: candidate A, "1.0 with its history trimmed": the same module, with the history's list and rate-limit
 *    indexes dropped (left: the workflow ID B-tree and the BRIN on completed_at) and its generated workflow IDs
 *    time-ordered (UUIDv7: `crypto.randomUUID` replaced in the process before the module loads).
 *  - `P0`: 1.0's own statements (the module's `WorkflowInserter`, `WorkflowClaimer` and `WorkflowStore`, on a
 *    stand-in database object that sends them on the study's connections), driven by the study's driver like
 *    candidates B and C: it separates what the driver does differently from the module from what a layout changes.
 */
const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');
const { Client } = require('pg');
const { LIBRARY_DIST } = require('../../../lib/config');
const { uuidv7 } = require('../uuidv7');
const { argumentsOf } = require('./prototype-common');

const SCHEMA = 'dedup_queue';
const QUEUE = 'study';
const WORKFLOW_NAME = 'StudyTasks.noop';
const TRIMMED_INDEXES = [
  'workflow_history_created_at',
  'workflow_history_by_queue_status',
  'workflow_history_by_workflow_name',
  'workflow_history_by_deduplication_id',
  'workflow_history_by_partition_key',
  'workflow_history_started_at',
];
/**
 * The active table's indexes of running rows (variant R): what a claim's update writes beside the primary key and the
 * key, measured apart for layout B, which has to do without them (docs/performance.md, "Three rules").
 */
const RUNNING_INDEXES = ['workflow_queue_running', 'workflow_queue_running_partition'];

let onJob = () => {};

function loadLibrary() {
  const from = (id) => require(require.resolve(id, { paths: [LIBRARY_DIST] }));
  from('reflect-metadata');
  return { common: from('@nestjs/common'), core: from('@nestjs/core'), lib: require(LIBRARY_DIST) };
}

async function boot(url, worker) {
  const { common, core, lib } = loadLibrary();
  class StudyTasks {
    async noop() {
      onJob();
      return null;
    }
  }
  common.Injectable()(StudyTasks);
  lib.Workflow({ name: WORKFLOW_NAME })(
    StudyTasks.prototype,
    'noop',
    Object.getOwnPropertyDescriptor(StudyTasks.prototype, 'noop'),
  );
  class StudyModule {}
  common.Module({
    imports: [
      lib.DedupQueueModule.forRoot({
        connection: { url },
        schema: SCHEMA,
        queues: [{ name: QUEUE, workerConcurrency: 32 }],
        worker,
      }),
    ],
    providers: [StudyTasks],
  })(StudyModule);
  const app = await core.NestFactory.createApplicationContext(StudyModule, { logger: ['error'] });
  return { app, lib, queues: app.get(lib.QueueService), tasks: app.get(StudyTasks) };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until the queue has no unfinished workflow (on a connection the study does not count as the store's). */
async function waitForEmptyQueue(url) {
  const client = new Client({ connectionString: url, application_name: 'bench-orchestrator' });
  await client.connect();
  try {
    for (;;) {
      const { rows } = await client.query(
        `SELECT count(*)::int AS n FROM ${SCHEMA}.workflow_queue WHERE queue_name = $1 AND status IN ('ENQUEUED', 'PENDING')`,
        [QUEUE],
      );
      if (rows[0].n === 0) return;
      await sleep(20);
    }
  } finally {
    await client.end();
  }
}

function seedSql(idSql) {
  return `INSERT INTO ${SCHEMA}.workflow_history (workflow_id, seq, queue_name, workflow_name, status, deduplication_id,
      inputs, executor_id, attempts, created_at, started_at, completed_at, updated_at)
    SELECT ${idSql}, nextval('${SCHEMA}.workflow_queue_seq_seq'), '${QUEUE}', '${WORKFLOW_NAME}', 'SUCCESS', 'old' || i,
           json_build_array(json_build_object('key', 'old' || i)), 'seed', 1, t, t, t, t
    FROM generate_series(1, $1::int) AS i, LATERAL (SELECT now() - interval '1 hour' + i * interval '1 millisecond' AS t) AS x`;
}

/** The form `variant` of the module as a study candidate. */
function libraryCandidate(variant) {
  const timeOrdered = variant === 'A';
  // NOTE: the module calls `crypto.randomUUID` at each enqueue; A's child processes generate time-ordered IDs instead.
  const useGeneratedIds = () => {
    if (timeOrdered) crypto.randomUUID = uuidv7;
  };
  const candidate = {
    id: { '1.0': 'l0-library', A: 'a-trimmed', P0: 'p0-library-sql', R: 'l0-no-running' }[variant],
    label: {
      '1.0': 'nest-dedup-queue 1.0 (the module)',
      A: 'A: 1.0 with the history by ID only, UUIDv7 (the module)',
      P0: "P0: 1.0's statements, the study's driver",
      R: 'the module without its running indexes',
    }[variant],

    async install(db, seed) {
      const { app } = await boot(db.url, false);
      await app.close();
      if (timeOrdered)
        await db.query(`DROP INDEX IF EXISTS ${TRIMMED_INDEXES.map((name) => `${SCHEMA}.${name}`).join(', ')}`);
      if (variant === 'R')
        await db.query(`DROP INDEX ${RUNNING_INDEXES.map((name) => `${SCHEMA}.${name}`).join(', ')}`);
      if (seed > 0) {
        await db.query(seedSql(timeOrdered ? 'uuidv7_at(t)' : 'gen_random_uuid()::text'), [seed]);
        await db.query(`VACUUM ANALYZE ${SCHEMA}.workflow_history`);
      }
    },
  };
  if (variant === 'P0') return { ...candidate, ...driverParts() };
  return {
    ...candidate,
    async enqueue({ url, jobs, keyPrefix, inputBytes }) {
      useGeneratedIds();
      const { app, queues, tasks } = await boot(url, false);
      const cpuAtStart = process.cpuUsage();
      const started = performance.now();
      for (let at = 0; at < jobs; at += 1000) {
        const items = Array.from({ length: Math.min(1000, jobs - at) }, (_, n) => ({
          args: [argumentsOf(`${keyPrefix}${at + n}`, inputBytes)],
          options: { deduplicationId: `${keyPrefix}${at + n}` },
        }));
        await queues.enqueueMany(QUEUE, tasks.noop, items);
      }
      return { seconds: (performance.now() - started) / 1000, cpuAtStart, close: () => app.close() };
    },
    async drain({ url, jobs }) {
      let done = 0;
      let firstAt;
      let allRan;
      const ran = new Promise((resolve) => (allRan = resolve));
      onJob = () => {
        firstAt ??= performance.now();
        if (++done === jobs) allRan();
      };
      const { app } = await boot(url, true);
      const cpuAtStart = process.cpuUsage();
      await ran;
      await waitForEmptyQueue(url);
      return { seconds: (performance.now() - firstAt) / 1000, cpuAtStart, close: () => app.close() };
    },
  };
}

/** P0: the module's statement classes on a stand-in database that sends them on the driver's connection. */
function driverParts() {
  const database = path.join(LIBRARY_DIST, 'database');
  // NOTE: builds differ in where these files sit (BENCH_LIBRARY_DIST may be an older one): 1.2 groups
  // `workflows/` by operation (`claim/`, `enqueue/`, `finish/`); before, the files sat in `workflows/` itself, and
  // before the workflow stores were split by role, the outcomes were written by `WorkflowStore`.
  const dist = (...candidates) => {
    const found = candidates.find((file) => fs.existsSync(path.join(database, file)));
    if (!found) throw new Error(`none of ${candidates.join(', ')} in ${database}`);
    return require(path.join(database, found));
  };
  const { workflowTables } = dist('tables/workflow-tables.js');
  const { insertStatements } = dist(
    'workflows/enqueue/workflow-insert.statements.js',
    'workflows/workflow-insert.statements.js',
  );
  const { WorkflowClaimer } = dist('workflows/claim/workflow-claimer.js', 'workflows/workflow-claimer.js');
  const outcomes = dist(
    'workflows/finish/workflow-outcomes.store.js',
    'workflows/workflow-outcomes.store.js',
    'workflows/workflow.store.js',
  );
  const WorkflowOutcomeStore = outcomes.WorkflowOutcomeStore ?? outcomes.WorkflowStore;
  const schemaSql = `"${SCHEMA}"`;
  const channel = `dedup_queue:${SCHEMA}`;
  const names = new Map();
  const nameOf = (sql) => {
    if (!names.has(sql)) names.set(sql, `p0_${names.size}`);
    return names.get(sql);
  };
  const standIn = (client) => ({
    schemaSql,
    schema: SCHEMA,
    citus: false,
    wakeUpChannel: channel,
    query: async (sql, params) => (await client.query({ name: nameOf(sql), text: sql, values: params })).rows,
  });
  const { manyGenerated } = insertStatements(workflowTables(schemaSql), false);
  const executorId = `study-${process.pid}`;
  const queue = { name: QUEUE, workerConcurrency: 32 };
  const perClient = new WeakMap();
  const classesFor = (client) => {
    if (!perClient.has(client)) {
      const database = standIn(client);
      perClient.set(client, { claimer: new WorkflowClaimer(database), store: new WorkflowOutcomeStore(database) });
    }
    return perClient.get(client);
  };
  const request = (limit) => ({ queue, executorId, limit, claimKeys: [`1:${WORKFLOW_NAME}`] });
  const toClaimed = (workflows) => workflows.map((w) => ({ workflowId: w.workflowId, attempt: w.attempts }));
  return {
    enqueueBatch: async (client, keys, inputBytes) => {
      const workflows = keys.map((key) => ({
        workflowId: crypto.randomUUID(),
        workflowIdGiven: false,
        queueName: QUEUE,
        workflowName: WORKFLOW_NAME,
        version: 1,
        deduplicationId: key,
        inputsJson: JSON.stringify([argumentsOf(key, inputBytes)]),
        timeoutMs: null,
        deadlineAt: null,
        maxAttempts: 1,
        maxRecoveryAttempts: 10,
        partitionKey: null,
        priority: 0,
        runAt: null,
        delayMs: null,
        maxDelayMs: null,
        deduplicationWindowMs: null,
        releaseKeyOnError: false,
        traceContext: null,
        parentWorkflowId: null,
        forkedFrom: null,
      }));
      const { rows } = await client.query({
        name: 'p0_enqueue',
        text: manyGenerated.sql,
        values: manyGenerated.params.values({ workflows, channel }),
      });
      return rows.filter((row) => row.inserted).length;
    },
    worker: () => ({
      setup: (client) =>
        client.query(
          `INSERT INTO ${schemaSql}.executors (executor_id, hostname, pid) VALUES ($1, 'study', $2)
           ON CONFLICT (executor_id) DO UPDATE SET heartbeat_at = now()`,
          [executorId, process.pid],
        ),
      claim: async (client, limit) => toClaimed((await classesFor(client).claimer.claim(request(limit))).workflows),
      finish: async (client, claimed, limit) => {
        const { claimer, store } = classesFor(client);
        const attached = claimer.attachable(request(limit));
        const outcomes = claimed.map((c) => ({
          workflowId: c.workflowId,
          queueName: QUEUE,
          attempt: c.attempt,
          status: 'SUCCESS',
          outputJson: null,
          error: null,
        }));
        const { recorded, claimedJson } = await store.recordOutcomes(executorId, outcomes, [], attached);
        return { recorded: recorded.length, claimed: toClaimed(attached.read(claimedJson)) };
      },
    }),
  };
}

module.exports = { libraryCandidate, SCHEMA, QUEUE };
