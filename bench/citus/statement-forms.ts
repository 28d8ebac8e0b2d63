/*
 * node -r ./test/support/swc-register.js bench/citus/statement-forms.ts: the CPU per run of alternative forms of a
 * hot statement group, the Citus coordinator's and the worker nodes' (summed), on a cluster of its own (test/support/citus-cluster.ts), each run in
 * `BEGIN … ROLLBACK` so that the data stays as it was (but for the checkpoint's forms as sent: autocommit, or a
 * transaction of its own, each inserting a new checkpoint); the forms interleaved in blocks,
 * medians of the blocks (FORM_ROUNDS, default 6, of FORM_ITERATIONS, default 400); FORMS (a regular expression)
 * runs only the forms whose names match it; FORM_BATCH (default 8) sets the rows of the queue `work`, which an
 * outcome batch's forms end (the forms named with a count assume the default).
 * Needs `npm run build`, the Debian postgresql-15 package and Citus.
 */
import 'reflect-metadata';
import { Client } from 'pg';
import { startCitusCluster } from '../../test/support/citus-cluster';
import { postmasterCpuTicks, postmasterPid } from './server-processes';
import { startQueueApp } from '../../test/support/queue-app';
import { RecordingTasks } from '../../test/fixtures/recording-tasks';
import { WORKFLOW_COLUMNS, workflowTables } from '../../packages/nest-dedup-queue/src/database/tables/workflow-tables';
import { insertStatements } from '../../packages/nest-dedup-queue/src/database/workflows/enqueue/workflow-insert.statements';
import type { NewWorkflow } from '../../packages/nest-dedup-queue/src/database/workflows/new-workflow';
import { WorkflowClaimer } from '../../packages/nest-dedup-queue/src/database/workflows/claim/workflow-claimer';
import { CitusClaim } from '../../packages/nest-dedup-queue/src/database/workflows/claim/workflow-claimer.citus';
import type { QueueDatabase } from '../../packages/nest-dedup-queue/src/database/connection/queue-database';
import { handOverKeysSql } from '../../packages/nest-dedup-queue/src/database/workflows/finish/workflow-finish.sql';
import { handOverKeysOnCitus } from '../../packages/nest-dedup-queue/src/database/workflows/finish/hand-over.citus';
import { usedParameters } from '../../packages/nest-dedup-queue/src/database/connection/sql-parameters';

const ROUNDS = Number(process.env.FORM_ROUNDS ?? 6);
const PER_BLOCK = Number(process.env.FORM_ITERATIONS ?? 400);
const BATCH = Number(process.env.FORM_BATCH ?? 8);
const ONLY = new RegExp(process.env.FORMS ?? '');
/** The partitioned queue's backlog (due rows) and its partitions, for its claim's forms. */
const PARTITIONED_BACKLOG = Number(process.env.FORM_BACKLOG ?? 200);
const PARTITIONS = 20;
/** The forms that run as they are sent (autocommit, or a transaction of their own), not in `BEGIN … ROLLBACK`. */
const OWN_TRANSACTION = /autocommit|of its own/;

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const sum = (values: number[]) => values.reduce((total, value) => total + value, 0);

async function main(): Promise<void> {
  const cluster = await startCitusCluster();
  process.env.DATABASE_URL = cluster.url;
  try {
    const coordinator = cluster.coordinator;
    const postmasters = [coordinator, ...cluster.workers].map((server) => postmasterPid(server.dataDir));
    const ticks = () => [postmasterCpuTicks(postmasters[0]), sum(postmasters.slice(1).map(postmasterCpuTicks))];
    const app = await startQueueApp(
      {
        connection: { url: cluster.url },
        distribution: 'citus',
        schema: 'forms',
        queues: [{ name: 'work' }, { name: 'parts', partitionConcurrency: 1 }],
        worker: false,
      },
      [RecordingTasks],
    );
    const { nothing } = app.get(RecordingTasks);
    for (let i = 0; i < BATCH; i++) await app.queues.enqueue('work', nothing, []);
    for (let i = 0; i < PARTITIONED_BACKLOG; i++) {
      await app.queues.enqueue('parts', nothing, [], { partitionKey: `p${i % PARTITIONS}` });
    }
    await app.close();
    const client = new Client({ connectionString: cluster.url });
    client.on('error', () => undefined);
    await client.connect();
    await client.query(
      `UPDATE forms.workflow_queue SET status = 'PENDING', executor_id = 'x' WHERE queue_name = 'work'`,
    );
    await client.query(`UPDATE forms.workflow_queue SET started_at = now() WHERE queue_name = 'work'`);
    const ids = (
      await client.query<{ workflow_id: string }>(
        `SELECT workflow_id FROM forms.workflow_queue WHERE queue_name = 'work'`,
      )
    ).rows.map((row) => row.workflow_id);
    const columns = WORKFLOW_COLUMNS.join(', ');
    const asText = WORKFLOW_COLUMNS.map((column) => `w.${column}::text`).join(', ');
    const finished = WORKFLOW_COLUMNS.map((column) =>
      column === 'status' ? `'SUCCESS'` : column === 'completed_at' ? 'now()' : `e.${column}`,
    ).join(', ');
    const lock = `SELECT w.workflow_id, w.attempts, w.active_deduplication_id FROM forms.workflow_queue AS w
      WHERE w.queue_name = $1 AND w.workflow_id = ANY($2::text[]) AND w.status = 'PENDING' AND w.executor_id = $3 FOR UPDATE`;
    const lockAll = `SELECT ${asText} FROM forms.workflow_queue AS w
      WHERE w.queue_name = $1 AND w.workflow_id = ANY($2::text[]) AND w.status = 'PENDING' AND w.executor_id = $3 FOR UPDATE`;
    const archiveSelect = `INSERT INTO forms.workflow_history (${columns}) SELECT ${finished} FROM
      (SELECT w.* FROM forms.workflow_queue AS w WHERE w.queue_name = $1 AND w.workflow_id = ANY($2::text[])) AS e`;
    const remove = `DELETE FROM forms.workflow_queue AS w WHERE w.queue_name = $1 AND w.workflow_id = ANY($2::text[])
      AND w.status = 'PENDING' AND w.executor_id = $3`;
    const removeReturning = `DELETE FROM forms.workflow_queue AS w WHERE w.queue_name = $1 AND w.workflow_id = ANY($2::text[])
      AND w.status = 'PENDING' AND w.executor_id = $3 RETURNING ${columns}`;
    const asReturned = { getTypeParser: () => (value: string) => value };
    const insertValues = async (rows: Array<Record<string, string | null>>) => {
      const values: unknown[] = [rows[0].queue_name];
      const tuples = rows.map(
        (row) =>
          `(${WORKFLOW_COLUMNS.map((column) => {
            if (column === 'queue_name') return '$1';
            if (column === 'completed_at') return 'now()';
            values.push(column === 'status' ? 'SUCCESS' : row[column]);
            return `$${values.length}`;
          }).join(', ')})`,
      );
      await client.query(`INSERT INTO forms.workflow_history (${columns}) VALUES ${tuples.join(', ')}`, values);
    };
    const owned = `SELECT queue_name, created_at::text AS created_at FROM forms.workflow_queue
      WHERE queue_name = $9 AND workflow_id = $1 AND status = 'PENDING' AND executor_id = $7 AND attempts = $8`;
    const stepColumns =
      'workflow_id, step_index, step_name, output, error, started_at, completed_at, queue_name, workflow_created_at';
    const stepParams = [ids[0], 0, 'step', '1', null, 3, 'x', 0, 'work'];
    let nextStep = 1;
    await client.query(
      `UPDATE forms.workflow_queue SET active_deduplication_id = 'held', attempts = 1 WHERE workflow_id = $1`,
      [ids[1]],
    );
    const handOverRow = (id: string, status: string, active: string | null, next: string | null) =>
      client.query(
        `INSERT INTO forms.workflow_queue (${columns}) SELECT ${WORKFLOW_COLUMNS.map((column) =>
          column === 'workflow_id'
            ? `$2::text`
            : column === 'status'
              ? `$3::text`
              : column === 'active_deduplication_id'
                ? `$4::text`
                : column === 'next_deduplication_id'
                  ? `$5::text`
                  : column,
        ).join(', ')} FROM forms.workflow_queue WHERE queue_name = 'work' AND workflow_id = $1`,
        [ids[0], id, status, active, next],
      );
    await handOverRow('hand-over-holder', 'PENDING', 'handed', null);
    await handOverRow('hand-over-follow-up', 'ENQUEUED', null, 'handed');
    const handOverParams = ['work', ['hand-over-holder'], ['handed'], 'wake'];
    const endHolder = 'DELETE FROM forms.workflow_queue WHERE queue_name = $1 AND workflow_id = ANY($2::text[])';
    const followedProbe = `SELECT 1 FROM forms.workflow_queue
       WHERE queue_name = $1 AND next_deduplication_id = ANY($3::text[]) AND status = 'ENQUEUED' LIMIT 1`;
    const oneHandOverStatement = `WITH ${handOverKeysSql(
      'forms.workflow_queue',
      'SELECT $1::text AS queue_name, key FROM unnest($3::text[]) AS key',
      '$4',
      '$1',
      true,
    )} SELECT count(*)::int AS handed_over FROM handed_over`;
    const run = (sql: string) => client.query(...usedParameters(sql, handOverParams));
    const query = async <R>(sql: string, params?: unknown[]) => (await client.query(sql, params)).rows as R[];
    const followUpStatements = insertStatements(workflowTables('forms'), true);
    let nextFollowUp = 0;
    const followUp = (): NewWorkflow => ({
      workflowId: `follow-up-${nextFollowUp++}`,
      workflowIdGiven: false,
      queueName: 'work',
      workflowName: 'RecordingTasks.nothing',
      version: 1,
      deduplicationId: 'held',
      inputsJson: '[]',
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
    });
    const startsReturning = `RETURNING started_at`;
    const holderParams = ['work', 'held', null];
    const claimer = new WorkflowClaimer({ schemaSql: 'forms', citus: true } as QueueDatabase);
    const citusClaim = new CitusClaim({ schemaSql: 'forms', citus: true } as QueueDatabase);
    const partitionedClaim = claimer['claimSql'](true, 4).replace(
      /WITH RECURSIVE partitions AS \([\s\S]*?FROM partitions AS p WHERE p\.partition_key IS NOT NULL\s*\),/,
      `WITH partitions AS (SELECT DISTINCT partition_key FROM forms.workflow_queue
         WHERE queue_name = $1 AND status = 'ENQUEUED' AND partition_key IS NOT NULL),`,
    );
    const claimKeys = ['1:RecordingTasks.nothing'];
    const CLAIMED = 4;
    const allForms: Record<string, () => Promise<unknown>> = {
      'nothing (the BEGIN … ROLLBACK around each form)': () => Promise.resolve(),
      "a partitioned queue's claim (4 of 20 partitions, concurrency 1 each): one router statement (WITH partitions …)":
        async () => {
          const { rows } = await client.query(partitionedClaim, ['parts', 'x', claimKeys, CLAIMED, 1, null, 0]);
          if (rows.length !== CLAIMED) throw new Error(`claimed ${rows.length}`);
        },
      "a partitioned queue's claim (4 of 20 partitions, concurrency 1 each): running per partition, picks, lock, update (fast path)":
        async () => {
          const running = await client.query<{ partition_key: string; n: number }>(
            citusClaim['runningPerPartitionSql'],
            ['parts'],
          );
          const full = running.rows.filter((row) => row.n >= 1).map((row) => row.partition_key);
          const picks = await client.query<{ workflow_id: string; admissible: boolean }>(
            citusClaim['partitionPicksSql'],
            ['parts', claimKeys, CLAIMED, [], [], 1, full],
          );
          const ids = picks.rows.filter((pick) => pick.admissible).map((pick) => pick.workflow_id);
          const locked = await client.query<{ workflow_id: string }>(citusClaim['lockPicksSql'], ['parts', ids]);
          const { rows } = await client.query(citusClaim['updateSql'], [
            'parts',
            'x',
            locked.rows.map((row) => row.workflow_id),
          ]);
          if (rows.length !== CLAIMED) throw new Error(`claimed ${rows.length}`);
        },
      "a duplicate policy's holder look-up: WITH expired AS (DELETE …) SELECT": async () => {
        await client.query(
          `WITH expired AS (DELETE FROM forms.workflow_queue
             WHERE queue_name = $1 AND active_deduplication_id = $2 AND dedup_expires_at <= now() RETURNING workflow_id)
           SELECT workflow_id, status, attempts, coalesce(inputs::jsonb = $3::jsonb, true) AS same_args FROM forms.workflow_queue
           WHERE queue_name = $1 AND active_deduplication_id = $2 AND workflow_id NOT IN (SELECT workflow_id FROM expired)
             AND (dedup_expires_at IS NULL OR dedup_expires_at > now())`,
          holderParams,
        );
      },
      "a duplicate policy's holder look-up: SELECT with the window's end (fast path)": async () => {
        await client.query(
          `SELECT workflow_id, status, attempts, coalesce(inputs::jsonb = $3::jsonb, true) AS same_args,
                  NOT (dedup_expires_at IS NULL OR dedup_expires_at > now()) AS expired
           FROM forms.workflow_queue WHERE queue_name = $1 AND active_deduplication_id = $2`,
          holderParams,
        );
      },
      "a rate-limited claim's starts (8): INSERT … SELECT from the claimed rows": async () => {
        await client.query(
          `INSERT INTO forms.queue_starts (queue_name, started_at, partition_key)
           SELECT queue_name, started_at, partition_key FROM forms.workflow_queue
           WHERE queue_name = $1 AND workflow_id = ANY($2::text[]) ${startsReturning}`,
          ['work', ids],
        );
      },
      "a rate-limited claim's starts (8): INSERT … VALUES (now())": async () => {
        await client.query(
          `INSERT INTO forms.queue_starts (queue_name, started_at, partition_key)
           VALUES ${ids.map((_, i) => `($1, now(), $${i + 2})`).join(', ')} ${startsReturning}`,
          ['work', ...ids.map(() => null)],
        );
      },
      "a rate-limited claim's starts (1): INSERT … SELECT from the claimed row": async () => {
        await client.query(
          `INSERT INTO forms.queue_starts (queue_name, started_at, partition_key)
           SELECT queue_name, started_at, partition_key FROM forms.workflow_queue
           WHERE queue_name = $1 AND workflow_id = ANY($2::text[]) ${startsReturning}`,
          ['work', ids.slice(0, 1)],
        );
      },
      "a rate-limited claim's starts (1): INSERT … VALUES (now())": async () => {
        await client.query(
          `INSERT INTO forms.queue_starts (queue_name, started_at, partition_key) VALUES ($1, now(), $2) ${startsReturning}`,
          ['work', null],
        );
      },
      "a queue-next follow-up's insert: one statement (CTE holder, INSERT … SELECT)": async () => {
        const { sql, params } = followUpStatements.followUp;
        await client.query(sql, params.values(followUp()));
      },
      "a queue-next follow-up's insert: holder FOR SHARE, INSERT … VALUES": async () => {
        const { followUpHolder, followUpValues } = followUpStatements;
        const workflow = followUp();
        await client.query(followUpHolder.sql, followUpHolder.params.values(workflow));
        await client.query(followUpValues.sql, followUpValues.params.values(workflow));
      },
      'hand-over (a follow-up waits): the holder ended alone (both forms start with it)': async () => {
        await run(endHolder);
      },
      'hand-over (a follow-up waits): the holder ended, probe, one router statement (WITH followed …), wake-up':
        async () => {
          await run(endHolder);
          if ((await run(followedProbe)).rows.length === 0) throw new Error('no follow-up waits');
          const [{ handed_over }] = (await run(oneHandOverStatement)).rows as Array<{ handed_over: number }>;
          if (handed_over !== 1) throw new Error(`handed over ${handed_over}`);
          await client.query('SELECT pg_notify($1, $2)::text', ['wake', 'work']);
        },
      'hand-over (a follow-up waits): the holder ended, fast-path statements (handOverKeysOnCitus)': async () => {
        await run(endHolder);
        const handed = await handOverKeysOnCitus(query, 'forms.workflow_queue', 'work', ['handed'], 'wake');
        if (handed !== 1) throw new Error(`handed over ${handed}`);
      },
      'outcome: lock, archive INSERT … SELECT, delete': async () => {
        await client.query(lock, ['work', ids, 'x']);
        await client.query(archiveSelect, ['work', ids]);
        await client.query(remove, ['work', ids, 'x']);
      },
      'outcome: lock (all columns), archive INSERT … VALUES, delete': async () => {
        const { rows } = await client.query<Record<string, string | null>>(lockAll, ['work', ids, 'x']);
        await insertValues(rows);
        await client.query(remove, ['work', ids, 'x']);
      },
      'outcome: DELETE … RETURNING, archive INSERT … VALUES': async () => {
        const { rows } = await client.query<Record<string, string | null>>({
          text: removeReturning,
          values: ['work', ids, 'x'],
          types: asReturned,
        });
        await insertValues(rows);
      },
      'checkpoint: INSERT … SELECT FROM (owned row)': async () => {
        await client.query(
          `INSERT INTO forms.steps (${stepColumns}) SELECT $1, $2, $3, $4::json, $5::json, now() - $6::float8 * interval '1 millisecond', now(),
             owned.queue_name, owned.created_at FROM (${owned.replace('created_at::text AS created_at', 'created_at')}) AS owned
           ON CONFLICT DO NOTHING RETURNING step_index`,
          stepParams,
        );
      },
      'checkpoint as one autocommit statement: INSERT … SELECT FROM (owned row)': async () => {
        await client.query(
          `INSERT INTO forms.steps (${stepColumns}) SELECT $1, $2, $3, $4::json, $5::json, now() - $6::float8 * interval '1 millisecond', now(),
             owned.queue_name, owned.created_at FROM (${owned.replace('created_at::text AS created_at', 'created_at')}) AS owned
           ON CONFLICT DO NOTHING RETURNING step_index`,
          [ids[0], nextStep++, ...stepParams.slice(2)],
        );
      },
      'checkpoint in a transaction of its own: BEGIN, owned row FOR SHARE, INSERT … VALUES, COMMIT': async () => {
        await client.query('BEGIN');
        const { rows } = await client.query<{ created_at: string }>(
          `${owned.replace('$9', '$4').replace('$7', '$2').replace('$8', '$3')} FOR SHARE`,
          [ids[0], 'x', 0, 'work'],
        );
        await client.query(
          `INSERT INTO forms.steps (${stepColumns}) VALUES ($1, $2, $3, $4::json, $5::json, now() - $6::float8 * interval '1 millisecond', now(), $7, $8)
           ON CONFLICT DO NOTHING RETURNING step_index`,
          [ids[0], nextStep++, 'step', '1', null, 3, 'work', rows[0].created_at],
        );
        await client.query('COMMIT');
      },
      'checkpoint: owned row FOR SHARE, INSERT … VALUES': async () => {
        const { rows } = await client.query<{ created_at: string }>(
          `${owned.replace('$9', '$4').replace('$7', '$2').replace('$8', '$3')} FOR SHARE`,
          [ids[0], 'x', 0, 'work'],
        );
        await client.query(
          `INSERT INTO forms.steps (${stepColumns}) VALUES ($1, $2, $3, $4::json, $5::json, now() - $6::float8 * interval '1 millisecond', now(), $7, $8)
           ON CONFLICT DO NOTHING RETURNING step_index`,
          [ids[0], 0, 'step', '1', null, 3, 'work', rows[0].created_at],
        );
      },
    };
    const forms = Object.fromEntries(Object.entries(allForms).filter(([name]) => ONLY.test(name)));
    const results = new Map<string, Array<[number, number]>>(Object.keys(forms).map((name) => [name, []]));
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, form] of Object.entries(forms)) {
        const before = ticks();
        const wrapped = !OWN_TRANSACTION.test(name);
        for (let i = 0; i < PER_BLOCK; i++) {
          if (wrapped) await client.query('BEGIN');
          await form();
          if (wrapped) await client.query('ROLLBACK');
        }
        const perRun = ticks().map((after, i) => Math.round(((after - before[i]) * 10_000) / PER_BLOCK));
        results.get(name)?.push([perRun[0], perRun[1]]);
      }
    }
    const spread = (values: number[]) => `${median(values)} µs (${Math.min(...values)}-${Math.max(...values)})`;
    for (const [name, runs] of results) {
      process.stdout.write(
        `${name}: coordinator ${spread(runs.map(([c]) => c))}, nodes ${spread(runs.map(([, n]) => n))}${
          OWN_TRANSACTION.test(name) ? '' : ', in BEGIN … ROLLBACK'
        }\n`,
      );
    }
    await client.end();
  } finally {
    await cluster.stop();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
