/**
 * On a Citus cluster (`distribution: 'citus'`), every statement of the hot path is a router query: it runs whole on
 * the one worker node that holds its queue. The test runs the workload of test/fixtures/active-work-workload.ts
 * (the one both statement audits share: every enqueue and duplicate policy, claims, outcomes, steps, sleep,
 * messages, events, child workflows, bulk control, `enqueue_workflow` from SQL, recovery, look-ups) on a cluster,
 * captures every statement the module sends, EXPLAINs each with its parameters, and fails on a plan with more than
 * one task, but for the calls that cannot know the queue (listed in FAN_OUT_BY_DESIGN and in docs/citus.md).
 */
import { appendFileSync } from 'node:fs';
import type { Pool } from 'pg';
import { CitusCluster, startCitusCluster } from './support/citus-cluster';
import { testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { captureStatements } from './support/statement-capture';
import { ACTIVE_WORK_OPTIONS, ACTIVE_WORK_PROVIDERS, runActiveWorkWorkload } from './fixtures/active-work-workload';
import { describeWithTools } from './support/system-tools';

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
  { what: 'a list across queues', shape: /ORDER BY seq DESC\s+LIMIT/ },
  { what: 'retention: the days past the retention', shape: /^SELECT b\.name, b\.lower, b\.upper FROM/ },
  {
    what: "retention: the rows of the upgrade's legacy partition past the retention",
    shape: /^SELECT workflow_id, created_at FROM \S+\.workflow_history_legacy AS l/,
  },
  {
    what: 'retention: is a workflow of that day still active (per day)',
    shape: /^SELECT 1 FROM \S+\.workflow_queue WHERE created_at >= \$1/,
  },
];

describeWithTools(['postgres-15', 'citus'], 'Citus: every hot statement runs on one node', () => {
  const schema = uniqueSchema('citus_statements');
  const capture = captureStatements(
    /workflow_queue|workflow_history|\.workflows\b|\.steps\b|workflow_events|workflow_messages|workflow_streams|pg_notify/,
  );
  let cluster: CitusCluster;
  let pool: Pool;
  let app: QueueApp;

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

  it('runs a workload through every path that touches active work', async () => {
    await runActiveWorkWorkload(app, pool, schema);
  }, 120_000);

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
