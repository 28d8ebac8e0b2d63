/**
 * Every statement the module sends that reaches the active table (`workflow_queue`) names its queue, so that a
 * distributed engine can send it to the one node that holds the queue. The test runs a workload that goes through
 * every path that touches active work (enqueue, duplicates and their policies, claims with and without limits,
 * outcomes, retries, steps, cancel, timeouts, recovery, resume, reschedule, give-back, look-ups), captures each
 * statement, EXPLAINs it with its parameters and reads every scan of the active table in the plan: each must
 * filter by `queue_name`, or be a probe by `workflow_id` made by a call that cannot know the queue (listed below,
 * and in docs/how-it-runs.md). It also runs each statement in a transaction it rolls back, to check that only
 * claims commit without waiting for the disk (`synchronous_commit = off`): enqueues and outcomes, which callers
 * see, wait for it.
 */
import { Injectable } from '@nestjs/common';
import type { Pool } from 'pg';
import { QueueService, Workflow, recv, runStep, setEvent, sleep } from 'nest-dedup-queue';
import { ExecutorStore, QueueDatabase } from 'nest-dedup-queue/testing';
import { RecordingTasks } from './fixtures/recording-tasks';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { captureStatements } from './support/statement-capture';
import { waitFor } from './support/wait-for';

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
  { what: 'reschedule(workflowId)', kind: 'probe by workflow ID', shape: /^WITH changed AS \(/ },
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

@Injectable()
class StepTasks {
  @Workflow({ maxAttempts: 2, backoff: { initialDelayMs: 5, jitter: false } })
  async stepsThenFailOnce(label: string): Promise<string> {
    const first = await runStep('first', () => `${label}-1`);
    const failures = await runStep('count', () => Date.now());
    if (StepTasks.failed.has(label)) return `${first} ${failures > 0}`;
    StepTasks.failed.add(label);
    throw new Error('once');
  }

  /** Sleeps long enough to be suspended, then waits for a message (suspended again). */
  @Workflow()
  async sleepThenReceive(): Promise<unknown> {
    await sleep(1100);
    return recv('t', { timeoutMs: 10_000 });
  }

  static readonly failed = new Set<string>();
}

/** Workflows that compose: a child enqueued and awaited, an event, and a parent left running with a child. */
@Injectable()
class ParentTasks {
  constructor(
    private readonly queues: QueueService,
    private readonly tasks: RecordingTasks,
  ) {}

  @Workflow()
  async parent(label: string): Promise<unknown> {
    const child = await this.queues.enqueue('work', this.tasks.echo, [label], { deduplicationId: `child-${label}` });
    const result = await child.getResult();
    await setEvent('done', result);
    return result;
  }

  @Workflow()
  async holdingParent(label: string): Promise<void> {
    await this.queues.enqueue('work', this.tasks.blocked, [label]);
    await this.tasks.gate(`${label}-parent`).wait();
  }
}

describe('every statement that reaches the active table names its queue', () => {
  const schema = uniqueSchema('queue_keys');
  const capture = captureStatements(
    /workflow_queue|\.workflows\b|workflow_events|workflow_messages|synchronous_commit/,
  );
  let pool: Pool;
  let app: QueueApp;

  beforeAll(async () => {
    pool = testPool();
    capture.capturing = true;
    app = await startQueueApp(
      {
        schema,
        leaseMs: 1000,
        heartbeatIntervalMs: 100,
        retentionMs: 60_000,
        queues: [
          { name: 'work', workerConcurrency: 2 },
          { name: 'limited', concurrency: 1 },
          { name: 'keyed', partitionConcurrency: 1 },
          { name: 'rated', rateLimit: { limit: 100, periodMs: 1000 } },
          { name: 'parked' },
        ],
        worker: { queues: ['work', 'limited', 'keyed', 'rated'] },
      },
      [RecordingTasks, StepTasks, ParentTasks],
    );
  });

  afterAll(async () => {
    capture.restore();
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('runs a workload through every path that touches active work', async () => {
    const tasks = app.get(RecordingTasks);
    const { queues } = app;
    const results: Array<Promise<unknown>> = [];
    for (const queue of ['work', 'limited', 'rated']) {
      results.push((await queues.enqueue(queue, tasks.echo, [queue], { deduplicationId: `k-${queue}` })).getResult());
    }
    results.push((await queues.enqueue('keyed', tasks.echo, ['p'], { partitionKey: 'p1' })).getResult());
    const given = await queues.enqueue('work', tasks.echo, ['given'], { workflowId: 'given-id' });
    await given.getResult();
    await queues.enqueue('work', tasks.echo, ['given'], { workflowId: 'given-id' });
    await queues.enqueueMany('work', tasks.echo, [{ args: [1] }, { args: [2], options: { deduplicationId: 'many' } }]);

    const holder = await queues.enqueue('work', tasks.blocked, ['hold'], { deduplicationId: 'held' });
    await waitFor(async () => (await holder.getStatus()).status === 'PENDING', { what: 'the holder to run' });
    await expect(queues.enqueue('work', tasks.echo, ['dup'], { deduplicationId: 'held' })).rejects.toThrow();
    await queues.enqueue('work', tasks.echo, ['next'], {
      deduplicationId: 'held',
      onDuplicate: 'replace',
      whenRunning: 'queue-next',
    });
    const delayed = await queues.enqueue('work', tasks.echo, ['later'], { deduplicationId: 'd', delayMs: 60_000 });
    await queues.enqueue('work', tasks.echo, ['replaced'], { deduplicationId: 'd', onDuplicate: 'replace' });
    await queues.reschedule(delayed.workflowId, { delayMs: 120_000 });
    await queues.cancel(delayed.workflowId);
    await queues.resume(delayed.workflowId);
    await queues.cancel(delayed.workflowId);
    const windowed = await queues.enqueue('work', tasks.echo, ['w'], {
      deduplicationId: 'window',
      deduplicationWindowMs: 60_000,
    });
    await windowed.getResult();
    await queues.enqueue('work', tasks.echo, ['w'], { deduplicationId: 'window', onDuplicate: 'return-existing' });
    // The third round's policies: supersede (of a queued and a windowed holder), requireSameArgs, a capped debounce.
    await queues.enqueue('parked', tasks.echo, ['s1'], { deduplicationId: 'sup' });
    await queues.enqueue('parked', tasks.echo, ['s2'], { deduplicationId: 'sup', onDuplicate: 'supersede' });
    await expect(
      queues.enqueue('work', tasks.echo, ['w2'], { deduplicationId: 'window', onDuplicate: 'supersede' }),
    ).rejects.toThrow();
    await expect(
      queues.enqueue('parked', tasks.echo, ['s3'], { deduplicationId: 'sup', requireSameArgs: true }),
    ).rejects.toThrow();
    await queues.enqueue('parked', tasks.echo, ['c1'], { deduplicationId: 'cap', onDuplicate: 'replace', delayMs: 10 });
    await queues.enqueue('parked', tasks.echo, ['c2'], {
      deduplicationId: 'cap',
      onDuplicate: 'replace',
      delayMs: 10,
      maxDelayMs: 100,
    });
    await queues.cancelMany({ queueName: 'parked', deduplicationIds: ['sup', 'cap'] });
    await queues.resumeMany({ queueName: 'parked', status: 'CANCELLED' });
    await queues.cancelMany({ queueName: 'parked' });
    results.push((await queues.enqueue('work', app.get(StepTasks).stepsThenFailOnce, ['s'])).getResult());
    const waiter = await queues.enqueue('work', app.get(StepTasks).sleepThenReceive, []);
    await waitFor(
      async () => {
        const status = await waiter.getStatus();
        return status.status === 'WAITING' && status.attempts === 2;
      },
      { what: 'the waiter to wait for its message', timeoutMs: 10_000 },
    );
    await queues.send(waiter.workflowId, 'message', { topic: 't', idempotencyKey: 'once' });
    await expect(waiter.getResult()).resolves.toBe('message');
    const timed = await queues.enqueue('work', tasks.blocked, ['slow'], { timeoutMs: 300 });
    await expect(timed.getResult()).rejects.toThrow();
    tasks.gate('hold').open();
    await holder.getResult();

    const parent = await queues.enqueue('work', app.get(ParentTasks).parent, ['composed']);
    await expect(queues.getEvent(parent.workflowId, 'done', { timeoutMs: 10_000 })).resolves.toBe('composed');
    await parent.getResult();
    const holding = await queues.enqueue('work', app.get(ParentTasks).holdingParent, ['holding']);
    await waitFor(async () => (await queues.list({ queueName: 'work', status: 'PENDING' })).length === 2, {
      what: 'the parent and its child to run',
    });
    await queues.cancel(holding.workflowId, { cancelChildren: true });
    tasks.gate('holding').open();
    tasks.gate('holding-parent').open();

    // A dead executor's workflow, recovered by this process's sweep.
    await pool.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, executor_id,
         attempts, started_at)
       VALUES ('orphan', 'work', 'RecordingTasks.echo', 'PENDING', '["orphan"]', 'gone', 1, now())`,
    );
    await expect((await queues.retrieve('orphan')).getResult()).resolves.toBe('orphan');
    const database = app.get(QueueDatabase);
    const executors = new ExecutorStore(database);
    await executors.releaseUnknown('nobody', 'work', []);
    await executors.recoverOwn('nobody', 'parked');
    await Promise.all(results);
    await queues.list({ queueName: 'work' });
    await queues.countByStatus();
  });

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
