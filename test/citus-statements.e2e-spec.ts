/**
 * On a Citus cluster (`distribution: 'citus'`), every statement of the hot path is a router query: it runs whole on
 * the one worker node that holds its queue. The test runs the workload of test/fixtures/active-work-workload.ts
 * (the one both statement audits share: every enqueue and duplicate policy, claims, outcomes, steps, sleep,
 * messages, events, child workflows, bulk control, `enqueue_workflow` from SQL, recovery, look-ups) on a cluster,
 * captures every statement the module sends, EXPLAINs each with its parameters, and fails on a plan with more than
 * one task, but for the calls that cannot know the queue (listed in FAN_OUT_BY_DESIGN and in docs/citus.md).
 *
 * Before it, the hot path alone (enqueue, claim, steps, a retry, outcomes, wake-ups, `enqueue_workflow`) is audited
 * more strictly (test/support/citus-plans.ts): no statement of it may be planned with a distributed subplan, "pull to
 * coordinator", a repartition or more than one task; the enqueue inserts must be router inserts (`INSERT … VALUES`),
 * the claim, the outcome's statements but the archive, and the hand-over's look-up fast-path router statements
 * (FAST_PATH), a rate-limited claim's starts (`queue_starts`: counted, recorded, pruned) router statements, and the
 * statements of
 * `enqueue_workflow` may not show any of those in the planner's messages.
 */
import { appendFileSync } from 'node:fs';
import type { Pool } from 'pg';
import { CitusCluster, startCitusCluster } from './support/citus-cluster';
import { testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { CapturedStatement, captureStatements } from './support/statement-capture';
import {
  ACTIVE_WORK_OPTIONS,
  ACTIVE_WORK_PROVIDERS,
  StepTasks,
  runActiveWorkWorkload,
} from './fixtures/active-work-workload';
import { RecordingTasks } from './fixtures/recording-tasks';
import { CitusPlanKind, ROUTER_PLAN_KINDS, explainOnCitus } from './support/citus-plans';
import { describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

/** The calls that cannot know the queue, and so ask every node (docs/citus.md lists them with their cost). */
const FAN_OUT_BY_DESIGN: Array<{ what: string; shape: RegExp }> = [
  {
    what: 'workflow IDs given by the caller, looked up in every queue',
    shape: /FROM \S+\.workflows\s+WHERE workflow_id = ANY\(\$1::text\[\]\)/,
  },
  {
    what: 'a look-up by bare workflow ID (the view)',
    shape: /FROM \S+\.workflows\b.*WHERE (\w+\.)?workflow_id = (\$1|ids\.id)/s,
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
 * The hot statements pinned to Citus's fast path ("Distributed planning for a fast-path router query"): the claim's
 * candidates and their update; the outcome's lock of the rows that end, their delete, a retry and its forgotten
 * steps; the look-up of a follow-up waiting for a freed key (the hand-over itself runs only when one waits).
 */
const FAST_PATH: RegExp[] = [
  /^SELECT workflow_id FROM \S+\.workflow_queue\s+WHERE queue_name = \$1 AND \(status = 'ENQUEUED'.*FOR UPDATE SKIP LOCKED$/s,
  /^UPDATE \S+\.workflow_queue AS w\s+SET status = 'PENDING', executor_id = \$2/,
  /^SELECT w\.workflow_id, w\.queue_name, w\.workflow_name, w\.attempts,.*FOR UPDATE$/s,
  /^DELETE FROM \S+\.workflow_queue WHERE queue_name = \$1 AND workflow_id = ANY\(\$2::text\[\]\)$/,
  /^UPDATE \S+\.workflow_queue AS w\s+SET status = 'ENQUEUED', executor_id = NULL/,
  /^SELECT workflow_id, min\(step_index\)::int AS first_failed FROM \S+\.steps/,
  /^DELETE FROM \S+\.steps\s+WHERE queue_name = \$1 AND workflow_id = ANY/,
  /^SELECT 1 FROM \S+\.workflow_queue\s+WHERE queue_name = \$1 AND next_deduplication_id = ANY/,
];
const FAST = new Set<CitusPlanKind>(['fast-path router']);

/** More statements pinned to the fast path, from the workload: a parked outcome, the follow-up probe of window keys. */
const WORKLOAD_FAST_PATH: RegExp[] = [
  /^UPDATE \S+\.workflow_queue AS w\s+SET status = 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'.*array_position/s,
  /^SELECT next_deduplication_id AS key FROM \S+\.workflow_queue\s+WHERE queue_name = \$1/,
];

describeWithTools(['postgres-15', 'citus'], 'Citus: every hot statement runs on one node', () => {
  const schema = uniqueSchema('citus_statements');
  const capture = captureStatements(
    /workflow_queue|workflow_history|\.workflows\b|\.steps\b|workflow_events|workflow_messages|workflow_streams|queue_starts|pg_notify/,
  );
  let cluster: CitusCluster;
  let pool: Pool;
  let app: QueueApp;
  let hot: CapturedStatement[] = [];
  let fromSql: string[] = [];

  beforeAll(async () => {
    cluster = await startCitusCluster();
    pool = testPool(cluster.url);
    capture.capturing = true;
    app = await startQueueApp(
      {
        connection: { url: cluster.url },
        distribution: 'citus',
        schema,
        ...ACTIVE_WORK_OPTIONS,
      },
      ACTIVE_WORK_PROVIDERS,
    );
  });

  afterAll(async () => {
    capture.restore();
    await app?.close();
    await pool?.end();
    await cluster?.stop();
  });

  it('runs the hot path: enqueues (one, a batch, a duplicate, from SQL), claims, steps, a retry, outcomes', async () => {
    const from = capture.captured.length;
    fromSql = await runHotPath(app, pool, schema);
    hot = capture.captured.slice(from);
  }, 60_000);

  it('plans every hot statement as a router statement, on the fast path but for the shapes that cannot be', async () => {
    const statements = new Map(hot.map((statement) => [statement.text, statement]));
    const kinds: Array<{ kind: CitusPlanKind; text: string }> = [];
    for (const { text, values } of statements.values()) {
      if (!/^\s*(WITH|SELECT|UPDATE|DELETE|INSERT)/i.test(text)) continue;
      const { kind, plan } = await explainOnCitus(pool, text, values);
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
    const offRouter = kinds.filter(
      ({ kind, text }) => !ROUTER_PLAN_KINDS.includes(kind) && !background.some(({ shape }) => shape.test(text)),
    );
    expect(offRouter).toEqual([]);
    const kindOf = (shape: RegExp) => kinds.filter(({ text }) => shape.test(text)).map(({ kind }) => kind);
    const active = /^INSERT INTO \S+\.workflow_queue \(/;
    expect(kindOf(active).length).toBeGreaterThanOrEqual(2);
    expect(new Set(kindOf(active))).toEqual(new Set(['router insert']));
    for (const shape of FAST_PATH) expect({ shape, kinds: new Set(kindOf(shape)) }).toEqual({ shape, kinds: FAST });
    expect(new Set(kindOf(/^INSERT INTO \S+\.steps \(/))).toEqual(new Set(['router']));
    expect(kindOf(/^SELECT pg_notify\(/)).toEqual(['coordinator']);
    expect(new Set(kindOf(/^INSERT INTO \S+\.queue_starts /))).toEqual(new Set(['router']));
    expect(new Set(kindOf(/^DELETE FROM \S+\.queue_starts WHERE queue_name = \$1/))).toEqual(FAST);
    expect(new Set(kindOf(/^(?!DELETE).*FROM \S+\.queue_starts\s+WHERE queue_name = \$1/s))).toEqual(
      new Set(['router']),
    );
    expect(kinds.filter(({ kind }) => kind === 'fast-path router').length).toBeGreaterThanOrEqual(4);
  });

  it("runs each statement of the SQL function enqueue_workflow on one node, none through the coordinator's rows", () => {
    expect(fromSql.filter((message) => /pull to coordinator|subplan|repartition/i.test(message))).toEqual([]);
    expect(fromSql.some((message) => /fast-path router query/i.test(message))).toBe(true);
  });

  it('runs a workload through every path that touches active work', async () => {
    await runActiveWorkWorkload(app, pool, schema);
  }, 120_000);

  it("plans the workload's parked outcome and its window keys' follow-up look-up on the fast path", async () => {
    const statements = new Map(capture.captured.map((statement) => [statement.text, statement]));
    for (const shape of WORKLOAD_FAST_PATH) {
      const kinds = new Set<CitusPlanKind>();
      for (const { text, values } of statements.values()) {
        if (shape.test(text.trim())) kinds.add((await explainOnCitus(pool, text, values)).kind);
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
        const { rows } = await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN (COSTS OFF) ${text}`, values);
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
      const { rows } = await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN (VERBOSE, COSTS OFF) ${text}`, values);
      const plan = rows.map((row) => row['QUERY PLAN']).join('\n');
      const tasks = [...plan.matchAll(/Query: (.*)\n\s*Node: host=\S+ port=(\d+)/g)];
      const notifiesOnWorker = tasks.some(
        ([, query, port]) => /pg_notify/i.test(query) && Number(port) !== cluster.coordinator.port,
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
  const batch = await queues.enqueueMany('work', tasks.echo, [
    { args: ['hot-1'] },
    { args: ['hot-2'], options: { deduplicationId: 'hot-batch' } },
    { args: ['hot-3'], options: { deduplicationId: 'hot-batch' } },
  ]);
  expect(batch.map((result) => result.status)).toEqual(['created', 'created', 'duplicate']);
  results.push((await queues.enqueue('work', app.get(StepTasks).stepsThenFailOnce, ['hot'])).getResult());
  results.push((await queues.enqueue('work', app.get(StepTasks).failingStepOnce, ['hot'])).getResult());
  results.push((await queues.enqueue('rated', tasks.echo, ['hot-rated'])).getResult());
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
    client.release();
  }
  tasks.gate('hot-keyed').open();
  results.push(keyed.getResult());
  await Promise.all(results);
  return planner;
}
