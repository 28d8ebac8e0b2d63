/**
 * On a Citus cluster (`distribution: 'citus'`), every statement of the hot path is a router query: it runs whole on
 * the one worker node that holds its queue. The test runs the workload of test/fixtures/active-work-workload.ts
 * (the one both statement audits share: every enqueue and duplicate policy, claims, outcomes, steps, sleep,
 * messages, events, child workflows, bulk control, `enqueue_workflow` from SQL, recovery, look-ups) on a cluster,
 * captures every statement the module sends, EXPLAINs each with its parameters, and fails on a plan with more than
 * one task, but for the calls that cannot know the queue (listed in FAN_OUT_BY_DESIGN and in docs/citus.md).
 *
 * Before it, the hot path alone (enqueue, a duplicate, a `queue-next` follow-up, a key kept for a window, claims of
 * a plain, a limited, a rate-limited and a partitioned queue, steps, a retry, outcomes in batches of fewer than 16
 * rows and of 20, the hand-over of a freed key, wake-ups, `enqueue_workflow`) is audited strictly (test/support/citus-plans.ts): each of its statements must be
 * planned on Citus's fast path, as a router insert (`INSERT … VALUES`), as a delegated call of a function distributed
 * by its queue (a step's checkpoint, `record_checkpoint`) or on the coordinator (no distributed table),
 * but for the exceptions listed by name with their reason (HOT_EXCEPTIONS), so that a new hot statement that falls to
 * Citus's full planner fails the audit; the statements of `enqueue_workflow` may not show a subplan, "pull to
 * coordinator" or a repartition in the planner's messages.
 */
import { appendFileSync } from 'node:fs';
import type { Pool } from 'pg';
import { useCitusCluster } from './support/citus-suite';
import { uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { CapturedStatement, captureStatements } from './support/statement-capture';
import {
  ACTIVE_WORK_OPTIONS,
  ACTIVE_WORK_PROVIDERS,
  StepTasks,
  runActiveWorkWorkload,
} from './fixtures/active-work-workload';
import { RecordingTasks } from './fixtures/recording-tasks';
import { CitusPlanKind, HOT_PLAN_KINDS, explainOnCitus } from './support/citus-plans';
import { describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

/** The calls that cannot know the queue, and so ask every node (docs/citus.md lists them with their cost). */
const FAN_OUT_BY_DESIGN: Array<{ what: string; shape: RegExp }> = [
  {
    what: "migration 023's copy of the last hour's starts into queue_starts (once, at the upgrade)",
    shape: /^INSERT INTO \S+\.queue_starts \(queue_name, started_at, partition_key\)\s+SELECT .* UNION ALL/s,
  },
  {
    what: "migration 025's ready rows and running counts (once, at the upgrade)",
    shape:
      /^(INSERT INTO \S+\.workflow_ready \(queue_name, priority, seq, workflow_id, partition_key\)\s+SELECT queue_name, priority, seq, workflow_id, partition_key FROM \S+\.workflow_queue\s+WHERE status = 'ENQUEUED'$|UPDATE \S+\.workflow_queue SET counted = true WHERE status = 'PENDING'$)/,
  },
  {
    what: 'workflow IDs given by the caller, looked up in every queue',
    shape: /FROM \S+\.workflows\s+WHERE workflow_id = ANY\(\$1::text\[\]\)/,
  },
  {
    what: 'a look-up by bare workflow ID (the view)',
    shape: /FROM \S+\.workflows\b.*WHERE (\w+\.)?workflow_id = (\$1|ids\.id)/s,
  },
  {
    what: "the heartbeat's renewal of an executor's leases in the queues it claims from (and their removal when it leaves)",
    shape:
      /^(UPDATE|DELETE FROM) \S+\.executor_leases\b.*WHERE queue_name = ANY\(\$1::text\[\]\) AND executor_id = \$2/s,
  },
  { what: 'counts per queue (countByStatus(), metrics, dashboard totals)', shape: /count\(\*\).*GROUP BY/s },
  { what: 'a list across queues', shape: /ORDER BY (seq DESC|created_at DESC, seq DESC)\s+LIMIT/ },
  { what: 'retention: the days past the retention', shape: /^SELECT b\.name, b\.lower, b\.upper FROM/ },
  {
    what: "retention: the rows of the upgrade's legacy partition past the retention",
    shape: /^SELECT workflow_id, created_at FROM \S+\.workflow_history_legacy AS l/,
  },
  {
    what: "retention: the rate limits' starts past the retention (a day at least)",
    shape: /^DELETE FROM \S+\.queue_starts WHERE started_at < now\(\)/,
  },
  {
    what: 'retention: is a workflow of that day still active (per day)',
    shape: /^SELECT 1 FROM \S+\.workflow_queue WHERE created_at >= \$1/,
  },
];

/**
 * The statements of the hot set (enqueue, claim incl. a limited, a rate-limited and a partitioned queue's, outcome
 * incl. archive and key records, steps, wake-ups, the hand-over of freed keys) that Citus plans otherwise than on its
 * fast path, as a router insert or on the coordinator, each with why (docs/citus.md, "The hot path's plans"). Any
 * other statement of the hot set planned otherwise fails the audit; each listed one must be met in the run, with the
 * plan kind given.
 */
const HOT_EXCEPTIONS: Array<{ what: string; why: string; shape: RegExp; kind: CitusPlanKind }> = [
  {
    what: 'outcome of 16 rows or more: archive',
    why:
      'a co-located INSERT … SELECT of the locked rows costs the cluster half of what a router insert of the rows ' +
      'as read costs at 64 rows (every value deparsed and parsed again), though it is planned in full',
    shape: /^INSERT INTO \S+\.workflow_history \([^)]*\) SELECT/,
    kind: 'router',
  },
  {
    what: 'outcome of 16 rows or more: key records',
    why: 'copied from the history rows just written by a co-located INSERT … SELECT, as the archive',
    shape: /^INSERT INTO \S+\.workflow_queue \(workflow_id, seq,[^)]*\)\s+SELECT/,
    kind: 'router',
  },
  {
    what: "claim: the candidates (a queue's and a partitioned queue's), each ready row with its active row",
    why:
      'a join of two co-located tables on the queue, which Citus plans as a router statement (its fast path takes one ' +
      'table): the ready rows order the candidates and are locked as the LIMIT takes them, the active rows say which ' +
      'are due and claimable and are locked next (FOR UPDATE SKIP LOCKED)',
    shape: /^SELECT r\.workflow_id(,\s+(r\.priority|row_number\(\) OVER turns)|\s+FROM)/,
    kind: 'router',
  },
];

/** Workflows ended in one outcome batch on the queue `bulk`: enough for the archive by `INSERT … SELECT`. */
const BULK = 20;

/** The workload's options, and the queue `bulk` that runs `BULK` workflows at once. */
const HOT_PATH_OPTIONS = {
  ...ACTIVE_WORK_OPTIONS,
  queues: [...(ACTIVE_WORK_OPTIONS.queues ?? []), { name: 'bulk', workerConcurrency: BULK }],
  worker: { queues: ['work', 'limited', 'keyed', 'rated', 'bulk'] },
};

/**
 * Statements captured while the hot path runs that are not of the hot set: look-ups through a handle, the heartbeat's
 * and the sweeps' work, retention. The strict rule does not apply to them (the wider audit below does).
 */
const NOT_HOT: Array<{ what: string; shape: RegExp }> = [
  { what: 'a look-up through a handle (the view)', shape: /FROM \S+\.workflows\b/ },
  { what: 'the sweep of due timers', shape: /^WITH due AS/ },
  {
    what: 'the sweep of due sleepers, and when the next one wakes',
    shape:
      /^(UPDATE \S+\.workflow_queue AS w\s+SET status = 'ENQUEUED', waiting_topic = NULL|SELECT \(SELECT min\(wake_at\))/,
  },
  { what: 'the recovery of expired leases, the release of claims not running here', shape: /^WITH\s+orphans AS/ },
  {
    what: "the heartbeat's renewal of its leases, the recovery's deletion of a queue's expired leases",
    shape:
      /^(UPDATE \S+\.executor_leases SET expires_at|DELETE FROM \S+\.executor_leases WHERE queue_name = \$1 AND expires_at)/,
  },
  {
    what: "the heartbeat's hand-over of stranded follow-ups",
    shape:
      /^WITH followed AS \(\s*SELECT DISTINCT fr\.queue_name, fr\.key FROM \(SELECT \$2::text AS queue_name, f\.next_deduplication_id/,
  },
  { what: 'the messages left to finished holders', shape: /^SELECT EXISTS \(SELECT 1 FROM \S+\.workflow_messages/ },
  {
    what: "the test's own wait for a result",
    shape: /^SELECT 1 FROM \S+\.workflow_history WHERE queue_name = '(work|bulk)'/,
  },
];

/** More statements pinned to the fast path, from the workload: a parked outcome, the follow-up probe of window keys. */
const WORKLOAD_FAST_PATH: RegExp[] = [
  /^UPDATE \S+\.workflow_queue AS w\s+SET status = 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'.*array_position/s,
  /^SELECT next_deduplication_id AS key FROM \S+\.workflow_queue\s+WHERE queue_name = \$1/,
];
const FAST = new Set<CitusPlanKind>(['fast-path router']);

describeWithTools(['postgres-15', 'citus'], 'Citus: every hot statement runs on one node', () => {
  const schema = uniqueSchema('citus_statements');
  const capture = captureStatements(
    /workflow_queue|workflow_ready|workflow_history|\.workflows\b|\.steps\b|workflow_events|workflow_messages|workflow_streams|queue_starts|executor_leases|record_checkpoint|pg_notify/,
  );
  const citus = useCitusCluster({ beforeClose: async () => capture.restore() });
  let app: QueueApp;
  let hot: CapturedStatement[] = [];
  let fromSql: string[] = [];

  beforeAll(async () => {
    capture.capturing = true;
    app = citus.closeAfter(
      await startQueueApp(
        {
          connection: { url: citus.cluster.url },
          distribution: 'citus',
          schema,
          ...HOT_PATH_OPTIONS,
        },
        ACTIVE_WORK_PROVIDERS,
      ),
    );
  });

  it('runs the hot path: enqueues (one, a batch, a duplicate, from SQL), claims, steps, a retry, outcomes', async () => {
    const from = capture.captured.length;
    fromSql = await runHotPath(app, citus.coordinator, schema);
    hot = capture.captured.slice(from);
  }, 60_000);

  it('plans every hot statement on the fast path, as a router insert or on the coordinator, but for the listed exceptions', async () => {
    const statements = new Map(hot.map((statement) => [statement.text, statement]));
    const kinds: Array<{ kind: CitusPlanKind; text: string }> = [];
    for (const { text, values } of statements.values()) {
      if (!/^\s*(WITH|SELECT|UPDATE|DELETE|INSERT)/i.test(text)) continue;
      const { kind, plan } = await explainOnCitus(citus.coordinator, text, values);
      kinds.push({ kind, text: text.trim() });
      if (process.env.CITUS_PLANS) appendFileSync(process.env.CITUS_PLANS, `[${kind}]\n${text}\n${plan}\n\n`);
    }
    if (process.env.CITUS_PLANS) {
      appendFileSync(
        process.env.CITUS_PLANS,
        kinds.map(({ kind, text }) => `${kind.padEnd(20)} ${text.replace(/\s+/g, ' ').slice(0, 160)}`).join('\n'),
      );
    }
    const background = FAN_OUT_BY_DESIGN.filter(({ what }) => what.startsWith('retention'));
    const hotKinds = kinds.filter(
      ({ text }) => !background.some(({ shape }) => shape.test(text)) && !NOT_HOT.some(({ shape }) => shape.test(text)),
    );
    const unlisted = hotKinds.filter(
      ({ kind, text }) =>
        !HOT_PLAN_KINDS.has(kind) &&
        !HOT_EXCEPTIONS.some((exception) => exception.shape.test(text) && exception.kind === kind),
    );
    expect(unlisted.map(({ kind, text }) => `${kind}: ${text.replace(/\s+/g, ' ').slice(0, 200)}`)).toEqual([]);
    const kindOf = (shape: RegExp) => hotKinds.filter(({ text }) => shape.test(text)).map(({ kind }) => kind);
    for (const { what, shape, kind } of HOT_EXCEPTIONS) {
      expect({ what, kinds: new Set(kindOf(shape)) }).toEqual({ what, kinds: new Set([kind]) });
    }
    const shapes: Array<{ what: string; shape: RegExp; kind: CitusPlanKind }> = [
      { what: 'enqueue', shape: /^INSERT INTO \S+\.workflow_queue \(workflow_id, queue_name/, kind: 'router insert' },
      {
        what: 'claim: the ready rows of what it took, deleted',
        shape: /^DELETE FROM \S+\.workflow_ready WHERE queue_name = \$1 AND priority = ANY\(\$2::int\[\]\)/,
        kind: 'fast-path router',
      },
      {
        what: "claim: the executor's lease in the queue locked",
        shape: /^SELECT 1 FROM \S+\.executor_leases WHERE queue_name = \$1 AND executor_id = \$2/,
        kind: 'fast-path router',
      },
      {
        what: 'claim: update',
        shape: /^UPDATE \S+\.workflow_queue AS w\s+SET status = 'PENDING', executor_id = \$2/,
        kind: 'fast-path router',
      },
      {
        what: 'limited claim: running count',
        shape: /^SELECT count\(\*\)::int AS n FROM \S+\.workflow_queue WHERE queue_name = \$1 AND counted_running/,
        kind: 'fast-path router',
      },
      {
        what: 'rate-limited claim: starts in the window',
        shape: /^SELECT count\(\*\)::int AS recent,.*FROM \S+\.queue_starts/s,
        kind: 'fast-path router',
      },
      {
        what: 'partitioned claim: running per partition',
        shape: /^SELECT partition_key, count\(\*\)::int AS n FROM \S+\.workflow_queue/,
        kind: 'fast-path router',
      },
      {
        what: 'rate-limited claim: starts recorded',
        shape: /^INSERT INTO \S+\.queue_starts \(queue_name, started_at, partition_key\)\s+VALUES/,
        kind: 'router insert',
      },
      {
        what: 'rate-limited claim: starts pruned',
        shape: /^DELETE FROM \S+\.queue_starts WHERE queue_name = \$1/,
        kind: 'fast-path router',
      },
      {
        what: 'outcome of fewer than 16 rows: the ending rows deleted',
        shape: /^DELETE FROM \S+\.workflow_queue AS w\s+WHERE w\.queue_name = \$1 AND w\.workflow_id = ANY.*RETURNING/s,
        kind: 'fast-path router',
      },
      {
        what: 'outcome of fewer than 16 rows: archive',
        shape: /^INSERT INTO \S+\.workflow_history \([^)]*\) VALUES/,
        kind: 'router insert',
      },
      {
        what: 'outcome of fewer than 16 rows: key records',
        shape: /^INSERT INTO \S+\.workflow_queue \(workflow_id, seq,[^)]*\) VALUES/,
        kind: 'router insert',
      },
      {
        what: 'outcome of 16 rows or more: the ending rows locked',
        shape:
          /^SELECT w\.workflow_id, w\.queue_name, w\.workflow_name, w\.attempts, w\.messages_sent > 0 .*FOR UPDATE$/s,
        kind: 'fast-path router',
      },
      {
        what: 'outcome of 16 rows or more: the ending rows deleted',
        shape: /^DELETE FROM \S+\.workflow_queue AS w WHERE .* AND w\.workflow_id = ANY\(\$\d+::text\[\]\)$/s,
        kind: 'fast-path router',
      },
      {
        what: 'outcome: window keys followed',
        shape: /^SELECT next_deduplication_id AS key FROM \S+\.workflow_queue\s+WHERE queue_name = \$1/,
        kind: 'fast-path router',
      },
      {
        what: 'hand-over: the freed keys a follow-up waits for',
        shape: /^SELECT DISTINCT next_deduplication_id AS key FROM \S+\.workflow_queue\s+WHERE queue_name = \$1::text/,
        kind: 'fast-path router',
      },
      {
        what: 'hand-over: their holders and key records',
        shape: /^SELECT active_deduplication_id AS key, status IN \(/,
        kind: 'fast-path router',
      },
      {
        what: 'hand-over: the follow-ups take their keys',
        shape: /^UPDATE \S+\.workflow_queue\s+SET active_deduplication_id = next_deduplication_id/,
        kind: 'fast-path router',
      },
      {
        what: 'retry',
        shape: /^UPDATE \S+\.workflow_queue AS w\s+SET status = 'ENQUEUED', executor_id = NULL/,
        kind: 'fast-path router',
      },
      {
        what: 'retry: first failed steps',
        shape: /^SELECT workflow_id, min\(step_index\)::int AS first_failed FROM \S+\.steps/,
        kind: 'fast-path router',
      },
      {
        what: 'retry: forgotten steps',
        shape: /^DELETE FROM \S+\.steps\s+WHERE queue_name = \$1 AND workflow_id = ANY/,
        kind: 'fast-path router',
      },
      {
        what: 'checkpoint: one call of record_checkpoint',
        shape: /^SELECT \S+\.record_checkpoint\(/,
        kind: 'delegated function call',
      },
      {
        what: "a follow-up's started holder locked",
        shape:
          /^SELECT workflow_id FROM \S+\.workflow_queue\s+WHERE queue_name = \$\d+::text AND active_deduplication_id = .*FOR SHARE$/s,
        kind: 'fast-path router',
      },
      {
        what: "a duplicate policy's look-up of the key's holder",
        shape: /^SELECT workflow_id, status, attempts, coalesce\(inputs::jsonb = \$3::jsonb, true\) AS same_args,/,
        kind: 'fast-path router',
      },
      { what: 'wake-ups', shape: /^SELECT pg_notify\(/, kind: 'coordinator' },
    ];
    for (const { what, shape, kind } of shapes) {
      expect({ what, kinds: new Set(kindOf(shape)) }).toEqual({ what, kinds: new Set([kind]) });
    }
  });

  it("locks a transactional step's owned row once in the step's transaction", () => {
    const ownedRowLocks = hot.filter(({ text }) =>
      /FROM \S+\.workflow_queue\s+WHERE queue_name = \$\d+ AND workflow_id = \$\d+ AND status = 'PENDING'.*FOR SHARE$/s.test(
        text.trim(),
      ),
    );
    const checkpointsInTransaction = hot.filter(({ text }) =>
      /^INSERT INTO \S+\.steps \([^)]*\)\s+VALUES/.test(text.trim()),
    );
    expect(checkpointsInTransaction).toHaveLength(1);
    expect(ownedRowLocks).toHaveLength(1);
  });

  it("runs each statement of the SQL function enqueue_workflow on one node, none through the coordinator's rows", () => {
    expect(fromSql.filter((message) => /pull to coordinator|subplan|repartition/i.test(message))).toEqual([]);
    expect(fromSql.some((message) => /fast-path router query/i.test(message))).toBe(true);
  });

  it('runs a workload through every path that touches active work', async () => {
    await runActiveWorkWorkload(app, citus.coordinator, schema);
  }, 120_000);

  it("plans the workload's parked outcome and its window keys' follow-up look-up on the fast path", async () => {
    const statements = new Map(capture.captured.map((statement) => [statement.text, statement]));
    for (const shape of WORKLOAD_FAST_PATH) {
      const kinds = new Set<CitusPlanKind>();
      for (const { text, values } of statements.values()) {
        if (shape.test(text.trim())) kinds.add((await explainOnCitus(citus.coordinator, text, values)).kind);
      }
      expect({ shape, kinds }).toEqual({ shape, kinds: FAST });
    }
  });

  it('plans every captured statement on one node, but for the fan-outs by design', async () => {
    capture.capturing = false;
    const statements = new Map(capture.captured.map((statement) => [statement.text, statement]));
    const multiTask: string[] = [];
    const fanOuts = new Set<string>();
    let explained = 0;
    for (const { text, values } of statements.values()) {
      if (!/^\s*(WITH|SELECT|UPDATE|DELETE|INSERT)/i.test(text)) continue;
      let plan: string;
      try {
        const { rows } = await citus.coordinator.query<{ 'QUERY PLAN': string }>(`EXPLAIN (COSTS OFF) ${text}`, values);
        plan = rows.map((row) => row['QUERY PLAN']).join('\n');
      } catch (error) {
        multiTask.push(`EXPLAIN failed (${(error as Error).message}) in: ${text.trim().slice(0, 300)}`);
        continue;
      }
      explained++;
      const counts = [...plan.matchAll(/Task Count: (\d+)/g)].map((match) => Number(match[1]));
      if (counts.every((count) => count <= 1)) continue;
      const known = FAN_OUT_BY_DESIGN.find(({ shape }) => shape.test(text.trim()));
      if (known) {
        fanOuts.add(known.what);
        continue;
      }
      multiTask.push(`Task Count ${counts.join(', ')} in: ${text.trim().slice(0, 300)}`);
      if (process.env.CITUS_PLANS) appendFileSync(process.env.CITUS_PLANS, `${text}\n${plan}\n\n`);
    }
    expect(explained).toBeGreaterThan(20);
    expect(multiTask).toEqual([]);
    expect([...fanOuts].sort()).toEqual(
      expect.arrayContaining([
        'a look-up by bare workflow ID (the view)',
        'counts per queue (countByStatus(), metrics, dashboard totals)',
      ]),
    );
  });

  it('sends every wake-up from the coordinator, where the listeners are: no pg_notify in a task of a worker node', async () => {
    const statements = new Map(capture.captured.map((statement) => [statement.text, statement]));
    const notifying = [...statements.values()].filter(({ text }) => /pg_notify/i.test(text));
    const onWorker: string[] = [];
    for (const { text, values } of notifying) {
      if (!/^\s*(WITH|SELECT|UPDATE|DELETE|INSERT)/i.test(text)) continue;
      const { rows } = await citus.coordinator.query<{ 'QUERY PLAN': string }>(
        `EXPLAIN (VERBOSE, COSTS OFF) ${text}`,
        values,
      );
      const plan = rows.map((row) => row['QUERY PLAN']).join('\n');
      const tasks = [...plan.matchAll(/Query: (.*)\n\s*Node: host=\S+ port=(\d+)/g)];
      const notifiesOnWorker = tasks.some(
        ([, query, port]) => /pg_notify/i.test(query) && Number(port) !== citus.cluster.coordinator.port,
      );
      if (notifiesOnWorker) {
        onWorker.push(text.trim().slice(0, 300));
        if (process.env.CITUS_PLANS) appendFileSync(process.env.CITUS_PLANS, `${text}\n${plan}\n\n`);
      }
    }
    expect(notifying.length).toBeGreaterThan(5);
    expect(onWorker).toEqual([]);
  });
});

/**
 * The hot path, alone: enqueues (one, one with a key and its rejected duplicate, a batch with a duplicate in it, from
 * SQL), and the claims, steps, retries (one after a failed step, whose checkpoint the retry forgets) and outcomes of
 * draining them; every call names its queue. Returns the planner's messages for the statements of the SQL function
 * `enqueue_workflow`, called with `client_min_messages = debug2`.
 */
async function runHotPath(app: QueueApp, pool: Pool, schema: string): Promise<string[]> {
  const tasks = app.get(RecordingTasks);
  const { queues } = app;
  const results: Array<Promise<unknown>> = [];
  results.push((await queues.enqueue('work', tasks.echo, ['hot'])).getResult());
  const keyed = await queues.enqueue('work', tasks.blocked, ['hot-keyed'], { deduplicationId: 'hot' });
  await expect(queues.enqueue('work', tasks.echo, ['hot-duplicate'], { deduplicationId: 'hot' })).rejects.toThrow();
  await waitFor(async () => (await keyed.getStatus()).status === 'PENDING', { what: 'the key holder to run' });
  const followUp = await queues.enqueue('work', tasks.echo, ['hot-follow-up'], {
    deduplicationId: 'hot',
    onDuplicate: 'replace',
    whenRunning: 'queue-next',
  });
  const windowed = await queues.enqueue('work', tasks.echo, ['hot-window'], {
    deduplicationId: 'hot-window',
    deduplicationWindowMs: 60_000,
  });
  results.push(windowed.getResult());
  for (const queue of ['limited', 'rated'])
    results.push((await queues.enqueue(queue, tasks.echo, [queue])).getResult());
  results.push((await queues.enqueue('keyed', tasks.echo, ['hot-partition'], { partitionKey: 'p1' })).getResult());
  const batch = await queues.enqueueMany('work', tasks.echo, [
    { args: ['hot-1'] },
    { args: ['hot-2'], options: { deduplicationId: 'hot-batch' } },
    { args: ['hot-3'], options: { deduplicationId: 'hot-batch' } },
  ]);
  expect(batch.map((result) => result.status)).toEqual(['created', 'created', 'duplicate']);
  results.push((await queues.enqueue('work', app.get(StepTasks).stepsThenFailOnce, ['hot'])).getResult());
  results.push((await queues.enqueue('work', app.get(StepTasks).failingStepOnce, ['hot'])).getResult());
  const client = await pool.connect();
  const planner: string[] = [];
  client.on('notice', (notice: { message?: string }) => planner.push(notice.message ?? ''));
  try {
    await client.query('BEGIN');
    await client.query(`SET LOCAL citus.multi_task_query_log_level = 'error'`);
    await client.query('SET LOCAL client_min_messages = debug2');
    const { rows } = await client.query<{ workflow_id: string }>(
      `SELECT * FROM "${schema}".enqueue_workflow(queue_name => 'work', workflow_name => 'RecordingTasks.echo',
         args => '["hot from sql"]'::json, deduplication_id => 'hot-sql')`,
    );
    await client.query('COMMIT');
    await waitFor(
      async () =>
        (
          await pool.query(
            `SELECT 1 FROM "${schema}".workflow_history WHERE queue_name = 'work' AND workflow_id = $1 AND status = 'SUCCESS'`,
            [rows[0].workflow_id],
          )
        ).rowCount === 1,
      { what: 'the workflow enqueued from SQL to succeed' },
    );
  } finally {
    client.removeAllListeners('notice');
    client.release();
  }
  const bulk = await queues.enqueueMany(
    'bulk',
    tasks.blocked,
    Array.from({ length: BULK }, (_, i) => ({
      args: ['hot-bulk'],
      options: { deduplicationId: `hot-bulk-${i}`, deduplicationWindowMs: 60_000 },
    })),
  );
  expect(bulk.map((result) => result.status)).toEqual(Array(BULK).fill('created'));
  await waitFor(() => tasks.calls.filter((call) => call.args[0] === 'hot-bulk').length === BULK, {
    what: `the ${BULK} workflows of the queue bulk to run at once`,
  });
  tasks.gate('hot-bulk').open();
  tasks.gate('hot-keyed').open();
  results.push(keyed.getResult(), followUp.getResult());
  await waitFor(
    async () =>
      (await pool.query(`SELECT 1 FROM "${schema}".workflow_history WHERE queue_name = 'bulk' AND status = 'SUCCESS'`))
        .rowCount === BULK,
    { what: `the ${BULK} workflows of the queue bulk to succeed` },
  );
  await Promise.all(results);
  return planner;
}
