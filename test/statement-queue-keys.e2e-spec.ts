/**
 * Every statement the module sends that reaches the active table (`workflow_queue`) names its queue, so that a
 * distributed engine can send it to the one node that holds the queue. The test runs the workload of
 * test/fixtures/active-work-workload.ts (shared with test/citus-statements.e2e-spec.ts), which goes through every
 * path that touches active work, captures each statement, EXPLAINs it with its parameters and reads every scan of
 * the active table in the plan: each must
 * filter by `queue_name`, or be a probe by `workflow_id` made by a call that cannot know the queue (listed below,
 * and in docs/how-it-runs.md). It also runs each statement in a transaction it rolls back, to check that only
 * claims commit without waiting for the disk (`synchronous_commit = off`): enqueues and outcomes, which callers
 * see, wait for it.
 */
import type { Pool } from 'pg';
import { ACTIVE_WORK_OPTIONS, ACTIVE_WORK_PROVIDERS, runActiveWorkWorkload } from './fixtures/active-work-workload';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { captureStatements } from './support/statement-capture';

/**
 * The statements that cannot know the queue: probes of the primary key by workflow ID (one per node on Citus), and
 * reads across queues (a fan-out to every node). docs/how-it-runs.md lists them.
 */
const UNKEYED_BY_DESIGN: Array<{ what: string; kind: 'probe by workflow ID' | 'across queues'; shape: RegExp }> = [
  {
    what: 'cancel(workflowId)',
    kind: 'probe by workflow ID',
    shape: /^WITH ended AS \(\s*DELETE FROM \S+\.workflow_queue AS w\s+WHERE w\.workflow_id = \$1/,
  },
  { what: 'resume(workflowId) of a dead letter', kind: 'probe by workflow ID', shape: /^WITH in_place AS \(/ },
  {
    what: 'reschedule(workflowId): the row locked, then changed',
    kind: 'probe by workflow ID',
    shape: /^(WITH changed AS \(|SELECT priority FROM \S+\.workflow_queue\s+WHERE workflow_id = \$1)/,
  },
  {
    what: 'a look-up by workflow ID (the view)',
    kind: 'probe by workflow ID',
    shape: /FROM \S+\.workflows\b.*WHERE (\w+\.)?workflow_id = (\$1|ids\.id)/s,
  },
  {
    what: 'a workflow ID given by the caller, checked in the other queues and the history (insert and re-check)',
    kind: 'probe by workflow ID',
    shape: /a\.workflow_id = |o\.workflow_id = m\.workflow_id/,
  },
  {
    what: "list({ parentWorkflowId }): a workflow's children, in any queue (the parent's index)",
    kind: 'probe by workflow ID',
    shape: /FROM \S+\.(workflows|workflow_queue|workflow_history)\s+WHERE parent_workflow_id = \$1/,
  },
  {
    what: 'retention: is a workflow of that day still active',
    kind: 'across queues',
    shape: /^SELECT b\.name, b\.lower, b\.upper FROM/,
  },
  {
    what: "retention: a dropped day's events",
    kind: 'across queues',
    shape: /^DELETE FROM \S+\.workflow_events WHERE workflow_created_at >= \$1/,
  },
  {
    what: "migration 023's copy of the last hour's starts into queue_starts (once, at the upgrade)",
    kind: 'across queues',
    shape: /^INSERT INTO \S+\.queue_starts \(queue_name, started_at, partition_key\)\s+SELECT .* UNION ALL/s,
  },
  {
    what: "migration 025's ready rows and running counts (once, at the upgrade)",
    kind: 'across queues',
    shape:
      /^(INSERT INTO \S+\.workflow_ready \(queue_name, priority, seq, workflow_id, partition_key\)\s+SELECT queue_name, priority, seq, workflow_id, partition_key FROM \S+\.workflow_queue\s+WHERE status = 'ENQUEUED'$|UPDATE \S+\.workflow_queue SET counted = true WHERE status = 'PENDING'$)/,
  },
  {
    what: 'counts per queue (countByStatus(), metrics, dashboard totals)',
    kind: 'across queues',
    shape: /count\(\*\).*GROUP BY/s,
  },
];

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Cond'?: string;
  Filter?: string;
  'Recheck Cond'?: string;
  'Hash Cond'?: string;
  'Merge Cond'?: string;
  'Join Filter'?: string;
  Plans?: PlanNode[];
}

/**
 * The conditions under which each scan of `relation` in a plan reads its rows: its own (a bitmap heap scan's with
 * its index scans'), and those of the joins above it, which may match it on `queue_name` to rows already keyed.
 */
function scansOf(node: PlanNode, relation: string | RegExp, joins: string[] = []): string[] {
  const name = node['Relation Name'];
  const own =
    name !== undefined &&
    (typeof relation === 'string' ? name === relation : relation.test(name)) &&
    node['Node Type'] !== 'ModifyTable'
      ? [
          [
            node['Index Cond'],
            node.Filter,
            node['Recheck Cond'],
            ...(node.Plans ?? []).map((p) => p['Index Cond']),
            ...joins,
          ]
            .filter(Boolean)
            .join(' AND '),
        ]
      : [];
  const join = [node['Hash Cond'], node['Merge Cond'], node['Join Filter']].filter((c): c is string => !!c);
  return [...own, ...(node.Plans ?? []).flatMap((child) => scansOf(child, relation, [...joins, ...join]))];
}

describe('every statement that reaches the active table names its queue', () => {
  const schema = uniqueSchema('queue_keys');
  const capture = captureStatements(
    /workflow_queue|\.workflows\b|workflow_events|workflow_messages|workflow_streams|synchronous_commit/,
  );
  let pool: Pool;
  let app: QueueApp;

  beforeAll(async () => {
    pool = testPool();
    capture.capturing = true;
    app = await startQueueApp({ schema, ...ACTIVE_WORK_OPTIONS }, ACTIVE_WORK_PROVIDERS);
  });

  afterAll(async () => {
    capture.restore();
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('runs a workload through every path that touches active work', async () => {
    await runActiveWorkWorkload(app, pool, schema);
  }, 120_000);

  it('filters every scan of workflow_queue by its queue, but for the calls that cannot know it', async () => {
    capture.capturing = false;
    const statements = new Map(capture.captured.map((statement) => [statement.text, statement]));
    const unkeyed: string[] = [];
    const probes = new Set<string>();
    let explained = 0;
    for (const { text, values } of statements.values()) {
      if (!/^\s*(WITH|SELECT|UPDATE|DELETE|INSERT)/i.test(text)) continue;
      const [{ 'QUERY PLAN': plan }] = (
        await pool.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`EXPLAIN (FORMAT JSON) ${text}`, values)
      ).rows;
      explained++;
      for (const conditions of scansOf(plan[0].Plan, /^(workflow_queue|workflow_events|workflow_messages(_\w+)?)$/)) {
        if (/queue_name = /.test(conditions)) continue;
        const known = UNKEYED_BY_DESIGN.find(({ shape }) => shape.test(text.trim()));
        if (known && (known.kind === 'across queues' || /workflow_id = /.test(conditions))) {
          probes.add(known.what);
          continue;
        }
        unkeyed.push(`${conditions || '(no condition)'}\n  in: ${text.trim().slice(0, 400)}`);
      }
    }
    expect(explained).toBeGreaterThan(20);
    const texts = [...statements.keys()];
    expect(texts.filter((text) => /workflow_messages/.test(text)).length).toBeGreaterThanOrEqual(3);
    expect(texts.some((text) => /status = 'WAITING'/.test(text))).toBe(true);
    expect(unkeyed).toEqual([]);
    expect([...probes].sort()).toEqual(
      expect.arrayContaining([
        'a look-up by workflow ID (the view)',
        'cancel(workflowId)',
        'counts per queue (countByStatus(), metrics, dashboard totals)',
      ]),
    );
  });

  it('lets only claims commit without waiting for the disk', async () => {
    capture.capturing = false;
    const statements = new Map(capture.captured.map((statement) => [statement.text, statement]));
    const withoutFlush: string[] = [];
    const waiting: string[] = [];
    const client = await pool.connect();
    try {
      // A throwaway test server turns it off for the whole server; the baseline here is what production runs.
      await client.query('SET synchronous_commit = on');
      for (const { text, values } of statements.values()) {
        if (!/^\s*(WITH|SELECT|UPDATE|DELETE|INSERT)/i.test(text)) continue;
        await client.query('BEGIN');
        // NOTE: a claim only runs its parts when there is a workflow to claim: one waits in the rolled-back transaction.
        await client.query(
          `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs)
           VALUES ('sync-probe', 'work', 'RecordingTasks.echo', 'ENQUEUED', '["probe"]')`,
        );
        await client.query('SAVEPOINT statement');
        const ran = await client.query(text, values).then(
          () => true,
          () => false,
        );
        if (!ran) await client.query('ROLLBACK TO SAVEPOINT statement');
        const [{ synchronous_commit: setting }] = (
          await client.query<{ synchronous_commit: string }>('SHOW synchronous_commit')
        ).rows;
        await client.query('ROLLBACK');
        if (setting === 'off') withoutFlush.push(text.trim());
        else if (ran && /INSERT INTO \S+\.(workflow_queue|workflow_history)/.test(text)) waiting.push(text.trim());
      }
    } finally {
      client.release();
    }
    const claims = /SET status = 'PENDING', executor_id = \$2/;
    expect(withoutFlush.length).toBeGreaterThan(0);
    expect(withoutFlush.filter((text) => !claims.test(text) || /INSERT INTO/.test(text))).toEqual([]);
    // Enqueues and outcomes (every statement that writes a workflow in or out) commit synchronously.
    expect(waiting.length).toBeGreaterThan(2);
    // A claim of a queue with global limits runs in a transaction that turns it off for that transaction only.
    expect(capture.captured.some(({ text }) => /SET LOCAL synchronous_commit = off/.test(text))).toBe(true);
  });
});
