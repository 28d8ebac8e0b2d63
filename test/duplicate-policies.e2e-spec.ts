/**
 * Duplicate policies (`onDuplicate`, `whenRunning`), deduplication windows and deduplication events.
 *
 * The storms run in real OS processes: two enqueuing processes (child-policy-enqueuer.ts) fire 50 concurrent
 * enqueues each with one key, released together over IPC, while a worker process (child-policy-worker.ts) runs the
 * holders whose runs block until the test inserts a release row. A separate connection polls the database every
 * few milliseconds during each storm and checks the invariants: never two unfinished workflows holding one key in
 * one queue, never more than one waiting follow-up, never an unfinished row of the key that holds neither the key
 * nor its "next" slot. A test-owned trigger logs every INSERT and every change of `inputs` (in the order they were
 * applied: updates of one row are serialised by its lock), so the tests can tell which replace was applied last.
 */
import { Injectable } from '@nestjs/common';
import {
  DeduplicationEvent,
  EnqueueOptions,
  InvalidArgumentError,
  QueueDeduplicatedError,
  Workflow,
  workflowContext,
} from 'nest-dedup-queue';
import { Client, Pool } from 'pg';
import { FixtureProcess, killFixtures } from './fixtures/child-harness';
import type { CallResult, RoundReport } from './fixtures/child-policy-enqueuer';
import { PolicyTasks, policyTablesSql } from './fixtures/child-policy-tasks';
import { GatedRuns } from './fixtures/recording-tasks';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';
import { activeTableLockWaits } from './support/lock-waits';
import { PolicyProcesses, startPolicyProcesses } from './support/policy-processes';

/** Concurrent enqueues per process and storm; two processes fire at once. */
const PER_PROCESS = 50;
const CALLS = 2 * PER_PROCESS;

const schema = uniqueSchema('policy');
const table = `"${schema}".workflows`;
let pool: Pool;
/** Worker-less; migrates the schema and enqueues the holders of the storms. */
let parent: QueueApp;

beforeAll(async () => {
  pool = testPool();
  // Small pools: the suite may share its Postgres (and its max_connections) with other test runs.
  parent = await startQueueApp(
    {
      schema,
      worker: false,
      connection: { url: databaseUrl(), poolSize: 3 },
      queues: [{ name: 'idle' }, { name: 'live' }],
    },
    [PolicyTasks],
  );
  await pool.query(policyTablesSql(schema));
  await pool.query(`
    CREATE TABLE "${schema}".inputs_log (
      seq         bigserial PRIMARY KEY,
      op          text NOT NULL,
      workflow_id text NOT NULL,
      inputs      text NOT NULL
    );
    CREATE FUNCTION "${schema}".log_inputs() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO "${schema}".inputs_log (op, workflow_id, inputs) VALUES (TG_OP, NEW.workflow_id, NEW.inputs::text);
      RETURN NULL;
    END $$;
    CREATE TRIGGER test_log_inputs AFTER INSERT OR UPDATE OF inputs ON "${schema}".workflow_queue
      FOR EACH ROW WHEN (NEW.status IN ('ENQUEUED', 'PENDING')) EXECUTE FUNCTION "${schema}".log_inputs();
  `);
});

afterAll(async () => {
  await killFixtures();
  await parent?.close();
  await dropSchema(pool, schema);
  await pool.end();
});

interface Row {
  workflow_id: string;
  status: string;
  inputs: string;
  active_deduplication_id: string | null;
  next_deduplication_id: string | null;
  /** not_before = 'infinity': a follow-up waiting for its holder. */
  waiting: boolean;
  not_before_null: boolean;
}

const ROW_COLUMNS = `workflow_id, status, inputs::text AS inputs, active_deduplication_id, next_deduplication_id,
  coalesce(not_before = 'infinity', false) AS waiting, not_before IS NULL AS not_before_null`;

async function rowsFor(queue: string, key: string): Promise<Row[]> {
  return (
    await pool.query(
      `SELECT ${ROW_COLUMNS} FROM ${table} WHERE queue_name = $1 AND deduplication_id = $2 ORDER BY seq`,
      [queue, key],
    )
  ).rows;
}

async function rowOf(workflowId: string): Promise<Row> {
  return (await pool.query(`SELECT ${ROW_COLUMNS} FROM ${table} WHERE workflow_id = $1`, [workflowId])).rows[0];
}

async function waitForStatus(workflowId: string, status: string, timeoutMs = 10_000): Promise<Row> {
  return waitFor(
    async () => {
      const row = await rowOf(workflowId);
      return row?.status === status && row;
    },
    { what: `workflow ${workflowId} to be ${status}`, timeoutMs },
  );
}

/** What the test-owned trigger logged for one workflow: its INSERT and every change of its arguments, in order. */
async function inputsLog(workflowId: string): Promise<Array<{ op: string; inputs: string }>> {
  return (
    await pool.query(`SELECT op, inputs FROM "${schema}".inputs_log WHERE workflow_id = $1 ORDER BY seq`, [workflowId])
  ).rows;
}

interface Sample {
  /** Unfinished rows of the queue holding the key. */
  active: number;
  /** Rows waiting in the key's follow-up slot. */
  next: number;
  /** Unfinished rows of the key (holder and follow-up). */
  open: number;
  /** Unfinished rows of the key holding neither the key nor the follow-up slot (would never run). */
  orphans: number;
  /** Keys of any queue held by more than one unfinished row. */
  doubleHeld: number;
}

interface InvariantReport {
  samples: number;
  /** Samples sent between the release of the storm and its last answer. */
  duringStorm: number;
  max: Sample;
  last: Sample;
}

/** Polls the invariants on its own connection every few milliseconds until stopped. */
class InvariantMonitor {
  private readonly client = new Client({ connectionString: databaseUrl() });
  private running = true;
  private loop?: Promise<void>;
  private samples = 0;
  private duringStorm = 0;
  private stormStart = Infinity;
  private stormEnd = Infinity;
  private readonly max: Sample = { active: 0, next: 0, open: 0, orphans: 0, doubleHeld: 0 };
  private last?: Sample;

  private constructor(
    private readonly queue: string,
    private readonly key: string,
  ) {}

  static async start(queue: string, key: string): Promise<InvariantMonitor> {
    const monitor = new InvariantMonitor(queue, key);
    monitor.client.on('error', () => undefined);
    await monitor.client.connect();
    await monitor.sample();
    monitor.loop = monitor.run();
    return monitor;
  }

  stormStarted(): void {
    this.stormStart = Date.now();
  }

  stormEnded(): void {
    this.stormEnd = Date.now();
  }

  async stop(): Promise<InvariantReport> {
    this.running = false;
    await this.loop;
    await this.sample();
    await this.client.end();
    return { samples: this.samples, duringStorm: this.duringStorm, max: { ...this.max }, last: this.last as Sample };
  }

  private async run(): Promise<void> {
    while (this.running) {
      await this.sample();
      await new Promise((resolve) => setTimeout(resolve, 3));
    }
  }

  private async sample(): Promise<void> {
    const began = Date.now();
    const { rows } = await this.client.query(
      `SELECT
         count(*) FILTER (WHERE queue_name = $1 AND status IN ('ENQUEUED', 'PENDING') AND active_deduplication_id = $2)::int AS active,
         count(*) FILTER (WHERE queue_name = $1 AND next_deduplication_id = $2)::int AS next,
         count(*) FILTER (WHERE queue_name = $1 AND deduplication_id = $2 AND status IN ('ENQUEUED', 'PENDING'))::int AS open,
         count(*) FILTER (WHERE queue_name = $1 AND deduplication_id = $2 AND status IN ('ENQUEUED', 'PENDING')
                            AND active_deduplication_id IS NULL AND next_deduplication_id IS NULL)::int AS orphans,
         (SELECT count(*)::int FROM (
            SELECT 1 FROM ${table} WHERE status IN ('ENQUEUED', 'PENDING') AND active_deduplication_id IS NOT NULL
            GROUP BY queue_name, active_deduplication_id HAVING count(*) > 1) AS held_twice) AS "doubleHeld"
       FROM ${table}`,
      [this.queue, this.key],
    );
    const sample = rows[0] as Sample;
    this.samples += 1;
    if (began >= this.stormStart && began <= this.stormEnd) this.duringStorm += 1;
    for (const field of Object.keys(this.max) as Array<keyof Sample>)
      this.max[field] = Math.max(this.max[field], sample[field]);
    this.last = sample;
  }
}

/** The invariants, checked on every sample: at most one holder; at most one follow-up with `followUps`. */
function expectInvariantsHeld(report: InvariantReport, { followUps = false } = {}): void {
  expect(report.duringStorm).toBeGreaterThan(0);
  expect(report.max).toEqual({
    active: expect.any(Number),
    next: expect.any(Number),
    open: expect.any(Number),
    orphans: 0,
    doubleHeld: 0,
  });
  expect(report.max.active).toBeLessThanOrEqual(1);
  expect(report.max.next).toBeLessThanOrEqual(followUps ? 1 : 0);
  expect(report.max.open).toBeLessThanOrEqual(followUps ? 2 : 1);
}

/** Splits the calls of a storm by outcome; any error other than QueueDeduplicatedError is unexpected. */
function outcomes(results: CallResult[]) {
  return {
    created: results.filter((result) => result.created === true),
    returned: results.filter((result) => result.created === false),
    rejected: results.filter((result) => result.error?.name === 'QueueDeduplicatedError'),
    unexpected: results.filter(
      (result) => result.error !== undefined && result.error.name !== 'QueueDeduplicatedError',
    ),
  };
}

describe('duplicate policies under 2 processes x 50 concurrent enqueues with one key', () => {
  let processes: PolicyProcesses;
  let enqueuers: FixtureProcess[] = [];
  let parentTasks: PolicyTasks;
  let round = 0;

  beforeAll(async () => {
    parentTasks = parent.get(PolicyTasks);
    processes = await startPolicyProcesses(pool, schema, 'idle,live');
    enqueuers = processes.enqueuers;
  });

  // Lets whatever still blocks in the worker finish, then stops the processes (afterAll kills what is left).
  afterAll(() => processes?.stop());

  /** Releases both enqueuing processes at once; each fires one enqueue per entry of `keys`, all concurrently. */
  async function storm(queue: string, keys: string[], options: EnqueueOptions, spacingMs = 0) {
    round += 1;
    const monitor = await InvariantMonitor.start(queue, keys[0]);
    monitor.stormStarted();
    for (const child of enqueuers) child.send({ type: 'go', round, queue, keys, options, spacingMs });
    const replies = await Promise.all(enqueuers.map((child) => child.message<RoundReport>('results', { round })));
    monitor.stormEnded();
    const invariants = await monitor.stop();
    for (const reply of replies) expect(reply.results).toHaveLength(keys.length);
    return {
      results: replies.flatMap((reply) => reply.results),
      events: replies.flatMap((reply) => reply.events),
      counted: replies.reduce((sum, reply) => sum + reply.counted, 0),
      invariants,
    };
  }

  const oneKey = (key: string) => Array.from({ length: PER_PROCESS }, () => key);

  /** Enqueues a holder into `live` and waits until the worker process runs it (it blocks until released). */
  async function runningHolder(key: string, label: string): Promise<string> {
    const handle = await parent.queues.enqueue('live', parentTasks.hold, [label], {
      deduplicationId: key,
      workflowId: label,
    });
    expect(handle.created).toBe(true);
    await waitFor(
      async () =>
        (await pool.query(`SELECT 1 FROM "${schema}".policy_events WHERE kind = 'started' AND label = $1`, [label]))
          .rowCount === 1,
      { what: `${label} to start in the worker process` },
    );
    expect(await rowOf(handle.workflowId)).toMatchObject({ status: 'PENDING', active_deduplication_id: key });
    return handle.workflowId;
  }

  const release = (label: string) =>
    pool.query(`INSERT INTO "${schema}".policy_release (label) VALUES ($1) ON CONFLICT DO NOTHING`, [label]);

  it("'reject': exactly one created, 99 QueueDeduplicatedError naming it", async () => {
    const key = 'storm-reject';
    const { results, events, counted, invariants } = await storm('idle', oneKey(key), { onDuplicate: 'reject' });

    const { created, returned, rejected, unexpected } = outcomes(results);
    expect(unexpected).toEqual([]);
    expect(created).toHaveLength(1);
    const holder = created[0].label;
    expect(created[0].workflowId).toBe(holder);
    expect(returned).toEqual([]);
    expect(rejected).toHaveLength(CALLS - 1);
    for (const { error } of rejected) {
      expect(error).toMatchObject({ queueName: 'idle', deduplicationId: key, existingWorkflowId: holder });
    }
    expectInvariantsHeld(invariants);
    expect(await rowsFor('idle', key)).toEqual([
      expect.objectContaining({ workflow_id: holder, status: 'ENQUEUED', active_deduplication_id: key }),
    ]);
    expect(events).toHaveLength(CALLS - 1);
    expect(new Set(events.map((event) => JSON.stringify(event)))).toEqual(
      new Set([
        JSON.stringify({ queueName: 'idle', deduplicationId: key, existingWorkflowId: holder, outcome: 'rejected' }),
      ]),
    );
    expect(counted).toBe(CALLS - 1);
  });

  it("'return-existing': one created, 99 handles with created=false naming it", async () => {
    const key = 'storm-return';
    const { results, events, counted, invariants } = await storm('idle', oneKey(key), {
      onDuplicate: 'return-existing',
    });

    const { created, returned, rejected, unexpected } = outcomes(results);
    expect(unexpected).toEqual([]);
    expect(rejected).toEqual([]);
    expect(created).toHaveLength(1);
    const holder = created[0].label;
    expect(created[0].workflowId).toBe(holder);
    expect(returned).toHaveLength(CALLS - 1);
    expect(new Set(returned.map((result) => result.workflowId))).toEqual(new Set([holder]));
    expectInvariantsHeld(invariants);
    expect(await rowsFor('idle', key)).toEqual([expect.objectContaining({ workflow_id: holder, status: 'ENQUEUED' })]);
    expect(events).toHaveLength(CALLS - 1);
    expect(events.every((event) => event.existingWorkflowId === holder && event.outcome === 'returned-existing')).toBe(
      true,
    );
    expect(counted).toBe(CALLS - 1);
  });

  it("'replace' with the holder not started: every call gets the same workflow, one row, the last replace's arguments", async () => {
    const key = 'storm-replace';
    const { results, events, invariants } = await storm('idle', oneKey(key), { onDuplicate: 'replace' });

    const { created, returned, rejected, unexpected } = outcomes(results);
    expect(unexpected).toEqual([]);
    expect(rejected).toEqual([]);
    expect(created).toHaveLength(1);
    const holder = created[0].label;
    expect(new Set(results.map((result) => result.workflowId))).toEqual(new Set([holder]));
    expect(returned).toHaveLength(CALLS - 1);
    expectInvariantsHeld(invariants);

    const rows = await rowsFor('idle', key);
    expect(rows).toEqual([
      expect.objectContaining({ workflow_id: holder, status: 'ENQUEUED', active_deduplication_id: key }),
    ]);
    const stored: string[] = JSON.parse(rows[0].inputs);
    expect(results.map((result) => result.label)).toContain(stored[0]);

    // The creator's INSERT, then every other call's replace exactly once; the row holds the last one applied.
    const log = await inputsLog(holder);
    expect(log[0]).toEqual({ op: 'INSERT', inputs: JSON.stringify([holder]) });
    const replaced = log.slice(1).map((entry) => (JSON.parse(entry.inputs) as string[])[0]);
    expect(log.slice(1).every((entry) => entry.op === 'UPDATE')).toBe(true);
    expect([...replaced].sort()).toEqual(returned.map((result) => result.label).sort());
    expect(rows[0].inputs).toBe(log[log.length - 1].inputs);

    expect(events).toHaveLength(CALLS - 1);
    expect(events.every((event) => event.existingWorkflowId === holder && event.outcome === 'replaced')).toBe(true);
  });

  it("'replace' + whenRunning 'queue-next' with a running holder: exactly one follow-up, promoted and run after the holder", async () => {
    const key = 'storm-next';
    const holder = await runningHolder(key, 'next-holder');
    const { results, events, counted, invariants } = await storm('live', oneKey(key), {
      onDuplicate: 'replace',
      whenRunning: 'queue-next',
    });

    const { created, returned, rejected, unexpected } = outcomes(results);
    expect(unexpected).toEqual([]);
    expect(rejected).toEqual([]);
    expect(created).toHaveLength(1);
    const followUp = created[0].label;
    expect(followUp).not.toBe(holder);
    expect(new Set(results.map((result) => result.workflowId))).toEqual(new Set([followUp]));
    expect(returned).toHaveLength(CALLS - 1);
    expectInvariantsHeld(invariants, { followUps: true });
    expect(invariants.last).toMatchObject({ active: 1, next: 1, open: 2 });

    // The holder keeps running and the key; one follow-up waits in the "next" slot, not due, without the key.
    expect(await rowsFor('live', key)).toEqual([
      expect.objectContaining({
        workflow_id: holder,
        status: 'PENDING',
        active_deduplication_id: key,
        next_deduplication_id: null,
      }),
      expect.objectContaining({
        workflow_id: followUp,
        status: 'ENQUEUED',
        active_deduplication_id: null,
        next_deduplication_id: key,
        waiting: true,
      }),
    ]);
    const log = await inputsLog(followUp);
    expect(log[0]).toEqual({ op: 'INSERT', inputs: JSON.stringify([followUp]) });
    expect(
      log
        .slice(1)
        .map((entry) => (JSON.parse(entry.inputs) as string[])[0])
        .sort(),
    ).toEqual(returned.map((result) => result.label).sort());
    const latest = log[log.length - 1].inputs;
    expect((await rowOf(followUp)).inputs).toBe(latest);
    expect(events).toHaveLength(CALLS);
    expect(events.every((event) => event.existingWorkflowId === holder && event.outcome === 'queued-next')).toBe(true);
    expect(counted).toBe(CALLS);

    // The handover, watched too: the statement that ends the holder gives the key to the follow-up.
    const monitor = await InvariantMonitor.start('live', key);
    monitor.stormStarted();
    await release('next-holder');
    const runLabel: string = JSON.parse(latest)[0];
    await waitFor(
      async () =>
        (
          await pool.query(`SELECT 1 FROM "${schema}".policy_events WHERE kind = 'started' AND workflow_id = $1`, [
            followUp,
          ])
        ).rowCount === 1,
      { what: 'the follow-up to start' },
    );
    monitor.stormEnded();
    expectInvariantsHeld(await monitor.stop(), { followUps: true });
    const started = (
      await pool.query(`SELECT label FROM "${schema}".policy_events WHERE kind = 'started' AND workflow_id = $1`, [
        followUp,
      ])
    ).rows;
    expect(started).toEqual([{ label: runLabel }]);
    expect(await rowOf(holder)).toMatchObject({ status: 'SUCCESS', active_deduplication_id: null });
    expect(await rowOf(followUp)).toMatchObject({
      status: 'PENDING',
      active_deduplication_id: key,
      next_deduplication_id: null,
      not_before_null: true,
    });

    await release(runLabel);
    await waitForStatus(followUp, 'SUCCESS');
    expect((await rowsFor('live', key)).map((row) => [row.workflow_id, row.status])).toEqual([
      [holder, 'SUCCESS'],
      [followUp, 'SUCCESS'],
    ]);
  });

  it("'replace' + whenRunning 'reject' with a running holder: all 100 rejected naming the holder", async () => {
    const key = 'storm-running-reject';
    const holder = await runningHolder(key, 'running-reject-holder');
    const { results, events, invariants } = await storm('live', oneKey(key), {
      onDuplicate: 'replace',
      whenRunning: 'reject',
    });

    const { created, returned, rejected, unexpected } = outcomes(results);
    expect(unexpected).toEqual([]);
    expect([...created, ...returned]).toEqual([]);
    expect(rejected).toHaveLength(CALLS);
    expect(new Set(rejected.map((result) => result.error?.existingWorkflowId))).toEqual(new Set([holder]));
    expectInvariantsHeld(invariants);
    expect(await rowsFor('live', key)).toEqual([
      expect.objectContaining({
        workflow_id: holder,
        status: 'PENDING',
        inputs: JSON.stringify(['running-reject-holder']),
      }),
    ]);
    expect(events.every((event) => event.existingWorkflowId === holder && event.outcome === 'rejected')).toBe(true);
    expect(events).toHaveLength(CALLS);

    await release('running-reject-holder');
    await waitForStatus(holder, 'SUCCESS');
    expect(await rowsFor('live', key)).toHaveLength(1);
  });

  it("'replace' + whenRunning 'return-existing' with a running holder: all 100 get the holder, its arguments unchanged", async () => {
    const key = 'storm-running-return';
    const holder = await runningHolder(key, 'running-return-holder');
    const { results, events, invariants } = await storm('live', oneKey(key), {
      onDuplicate: 'replace',
      whenRunning: 'return-existing',
    });

    const { created, returned, rejected, unexpected } = outcomes(results);
    expect(unexpected).toEqual([]);
    expect([...created, ...rejected]).toEqual([]);
    expect(returned).toHaveLength(CALLS);
    expect(new Set(returned.map((result) => result.workflowId))).toEqual(new Set([holder]));
    expectInvariantsHeld(invariants);
    expect(await rowsFor('live', key)).toEqual([
      expect.objectContaining({
        workflow_id: holder,
        status: 'PENDING',
        inputs: JSON.stringify(['running-return-holder']),
      }),
    ]);
    expect(events).toHaveLength(CALLS);
    expect(events.every((event) => event.existingWorkflowId === holder && event.outcome === 'returned-existing')).toBe(
      true,
    );

    await release('running-return-holder');
    await waitForStatus(holder, 'SUCCESS');
  });

  it.each<[string, EnqueueOptions]>([
    ["'reject'", { onDuplicate: 'reject' }],
    ["'return-existing'", { onDuplicate: 'return-existing' }],
    ["'replace' + 'queue-next'", { onDuplicate: 'replace', whenRunning: 'queue-next' }],
  ])(
    '%s while holders keep finishing: every call names a workflow that held the key, runs never overlap',
    async (name, options) => {
      const key = `storm-churn-${options.onDuplicate}`;
      // Every workflow of this storm finishes as soon as it starts (its release row exists beforehand), so the key
      // is taken and freed again and again while the calls arrive: a stream of 50 calls per process over a second.
      const labels = enqueuers.flatMap((_, child) =>
        Array.from({ length: PER_PROCESS }, (__, n) => `${'ab'[child]}-r${round + 1}-${n}`),
      );
      await pool.query(`INSERT INTO "${schema}".policy_release (label) SELECT unnest($1::text[])`, [labels]);
      const { results, invariants } = await storm('live', oneKey(key), options, 20);

      const { created, rejected, unexpected } = outcomes(results);
      expect(unexpected).toEqual([]);
      if (options.onDuplicate !== 'reject') expect(rejected).toEqual([]);
      // With 'replace', a stream of replacements may keep the first holder from starting (its row is locked by one
      // replace after another when the worker looks), so only the other policies are sure to see the key change hands.
      expect(created.length).toBeGreaterThanOrEqual(options.onDuplicate === 'replace' ? 1 : 2);
      expectInvariantsHeld(invariants, { followUps: options.whenRunning === 'queue-next' });
      const rows = await waitFor(
        async () => {
          const current = await rowsFor('live', key);
          return current.every((row) => row.status === 'SUCCESS') && current;
        },
        { what: `every workflow of the key to finish (${name})` },
      );
      expect(rows).toHaveLength(created.length);
      const ids = new Set(rows.map((row) => row.workflow_id));
      const named = results.map((result) => result.workflowId ?? result.error?.existingWorkflowId);
      expect(named.filter((workflowId) => !ids.has(workflowId as string))).toEqual([]);

      // One key, one run at a time: each run started after the previous one had finished.
      const { rows: runs } = await pool.query(
        `SELECT workflow_id, min(at) FILTER (WHERE kind = 'started') AS started, max(at) FILTER (WHERE kind = 'finished') AS finished
       FROM "${schema}".policy_events WHERE workflow_id = ANY($1) GROUP BY workflow_id ORDER BY started`,
        [[...ids]],
      );
      expect(runs).toHaveLength(ids.size);
      const overlaps = runs.slice(1).filter((run, index) => run.started < runs[index].finished);
      expect(overlaps).toEqual([]);
    },
  );

  it('many keys at once from two processes in opposite orders: one workflow per key, no other error', async () => {
    // Each process enqueues the same 200 keys, concurrently, one call per key, the second process in reverse
    // order (two web servers receiving the same burst of webhooks). A loaded database, simulated: each inserted row
    // of this test takes a millisecond more (a test-owned trigger), so the two processes' statements overlap.
    await pool.query(`
      CREATE FUNCTION "${schema}".slow_many_insert() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_sleep(0.001);
        RETURN NEW;
      END $$;
      CREATE TRIGGER test_slow_many_insert BEFORE INSERT ON "${schema}".workflow_queue
        FOR EACH ROW WHEN (NEW.deduplication_id LIKE 'many-%') EXECUTE FUNCTION "${schema}".slow_many_insert();
    `);
    for (let attempt = 1; attempt <= 2; attempt++) {
      const keys = Array.from({ length: 200 }, (_, n) => `many-${attempt}-${n}`);
      round += 1;
      const monitor = await InvariantMonitor.start('idle', keys[0]);
      monitor.stormStarted();
      enqueuers[0].send({ type: 'go', round, queue: 'idle', keys, options: {} });
      enqueuers[1].send({ type: 'go', round, queue: 'idle', keys: [...keys].reverse(), options: {} });
      const replies = await Promise.all(enqueuers.map((child) => child.message<RoundReport>('results', { round })));
      monitor.stormEnded();
      const invariants = await monitor.stop();
      const { created, rejected, unexpected } = outcomes(replies.flatMap((reply) => reply.results));

      expect(
        unexpected.map((result) => `${result.label}: ${result.error?.name}: ${result.error?.message}`).slice(0, 5),
      ).toEqual([]);
      expect(invariants.max.doubleHeld).toBe(0);
      expect(created).toHaveLength(keys.length);
      expect(new Set(created.map((result) => result.deduplicationId)).size).toBe(keys.length);
      const creatorOf = new Map(created.map((result) => [result.deduplicationId, result.label]));
      expect(rejected).toHaveLength(keys.length);
      for (const result of rejected)
        expect(result.error?.existingWorkflowId).toBe(creatorOf.get(result.deduplicationId));
      const { rows } = await pool.query(
        `SELECT count(*)::int AS count FROM ${table} WHERE deduplication_id = ANY($1)`,
        [keys],
      );
      expect(rows[0].count).toBe(keys.length);
    }
  });
});

/** Workflows run by the in-process worker: each run is recorded, and `hold` waits for its gate. */
@Injectable()
class LocalTasks extends GatedRuns<{ label: string; workflowId: string; attempt: number }> {
  @Workflow()
  async hold(label: string, outcome: 'succeed' | 'fail' = 'succeed'): Promise<string> {
    const { workflowId, attempt } = workflowContext();
    this.runs.push({ label, workflowId, attempt });
    await this.gate(label).wait();
    if (outcome === 'fail') throw new Error(`${label} failed on purpose`);
    return label;
  }

  /** Fails its first `failures` attempts, each after its gate `<label>#<attempt>` opens; then returns at once. */
  @Workflow({ maxAttempts: 2, backoff: { initialDelayMs: 60_000, maxDelayMs: 60_000, jitter: false } })
  async retried(label: string, failures: number): Promise<string> {
    const { workflowId, attempt } = workflowContext();
    this.runs.push({ label, workflowId, attempt });
    if (attempt <= failures) {
      await this.gate(`${label}#${attempt}`).wait();
      throw new Error(`${label} attempt ${attempt} failed on purpose`);
    }
    return label;
  }

  @Workflow()
  async echo(value: string): Promise<string> {
    return value;
  }

  @Workflow()
  async fail(message: string): Promise<never> {
    throw new Error(message);
  }
}

describe('duplicate policies, windows and events in one process', () => {
  let app: QueueApp;
  let tasks: LocalTasks;

  beforeAll(async () => {
    app = await startQueueApp(
      {
        schema,
        connection: { url: databaseUrl(), poolSize: 6 },
        queues: [{ name: 'local', workerConcurrency: 20 }, { name: 'local2' }],
        shutdownGraceMs: 1000,
      },
      [LocalTasks],
    );
    tasks = app.get(LocalTasks);
  });

  afterAll(async () => {
    tasks?.openAll();
    await app?.close();
  });

  const started = (label: string) => waitFor(() => tasks.ran(label)[0], { what: `${label} to start` });

  const rejection = (promise: Promise<unknown>) =>
    promise.then(
      () => undefined,
      (error: unknown) => error,
    );

  describe("'replace' and 'queue-next'", () => {
    it('replaces the arguments of an ENQUEUED holder, and its start time only when the call gives one', async () => {
      const key = 'replace-unit';
      const holder = await app.queues.enqueue('local', tasks.hold, ['replace-a'], {
        deduplicationId: key,
        delayMs: 3_600_000,
      });
      expect(holder.created).toBe(true);
      const notBefore = async () =>
        (
          await pool.query(
            `SELECT (extract(epoch FROM not_before - now()) * 1000)::float8 AS ms, not_before FROM ${table} WHERE workflow_id = $1`,
            [holder.workflowId],
          )
        ).rows[0];
      const first = await notBefore();
      expect(first.ms).toBeGreaterThan(3_500_000);

      const kept = await app.queues.enqueue('local', tasks.hold, ['replace-b'], {
        deduplicationId: key,
        onDuplicate: 'replace',
      });
      expect({ workflowId: kept.workflowId, created: kept.created }).toEqual({
        workflowId: holder.workflowId,
        created: false,
      });
      expect((await rowOf(holder.workflowId)).inputs).toBe(JSON.stringify(['replace-b']));
      expect((await notBefore()).not_before).toEqual(first.not_before);

      await app.queues.enqueue('local', tasks.hold, ['replace-c'], {
        deduplicationId: key,
        onDuplicate: 'replace',
        delayMs: 7_200_000,
      });
      const delayed = await notBefore();
      expect(delayed.ms).toBeGreaterThan(7_100_000);
      expect((await rowOf(holder.workflowId)).inputs).toBe(JSON.stringify(['replace-c']));

      const runAt = new Date(Date.now() + 86_400_000);
      await app.queues.enqueue('local', tasks.hold, ['replace-d'], {
        deduplicationId: key,
        onDuplicate: 'replace',
        runAt,
      });
      expect(((await notBefore()).not_before as Date).getTime()).toBe(runAt.getTime());

      const now = await app.queues.enqueue('local', tasks.hold, ['replace-e'], {
        deduplicationId: key,
        onDuplicate: 'replace',
        delayMs: 0,
      });
      expect(now.workflowId).toBe(holder.workflowId);
      const run = await started('replace-e');
      expect(run).toEqual({ label: 'replace-e', workflowId: holder.workflowId, attempt: 1 });
      tasks.gate('replace-e').open();
      await expect(holder.getResult()).resolves.toBe('replace-e');
      expect(['replace-a', 'replace-b', 'replace-c', 'replace-d'].flatMap((label) => tasks.ran(label))).toEqual([]);
      expect(await rowsFor('local', key)).toHaveLength(1);
    });

    it('creates the workflow when nothing holds the key', async () => {
      const handle = await app.queues.enqueue('local', tasks.echo, ['fresh'], {
        deduplicationId: 'replace-fresh',
        onDuplicate: 'replace',
        whenRunning: 'queue-next',
      });
      expect(handle.created).toBe(true);
      await expect(handle.getResult()).resolves.toBe('fresh');
    });

    it('refuses whenRunning without replace, and a window together with queue-next, before writing', async () => {
      await expect(
        app.queues.enqueue('local', tasks.echo, ['x'], { deduplicationId: 'bad-options', whenRunning: 'queue-next' }),
      ).rejects.toMatchObject({
        name: 'InvalidArgumentError',
        field: 'options.whenRunning',
      });
      const error = await rejection(
        app.queues.enqueue('local', tasks.echo, ['x'], {
          deduplicationId: 'bad-options',
          onDuplicate: 'replace',
          whenRunning: 'queue-next',
          deduplicationWindowMs: 1000,
        }),
      );
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(await rowsFor('local', 'bad-options')).toEqual([]);
    });

    type Ending = 'SUCCESS' | 'ERROR' | 'CANCELLED' | 'TIMED_OUT';
    it.each<[Ending, string]>([
      ['SUCCESS', 'SUCCESS'],
      ['ERROR', 'ERROR'],
      ['CANCELLED', 'CANCELLED'],
      ['TIMED_OUT', 'CANCELLED'],
    ])('promotes the follow-up when the holder ends with %s', async (ending, finalStatus) => {
      const key = `promote-${ending.toLowerCase()}`;
      const holderLabel = `${key}-holder`;
      const holder = await app.queues.enqueue(
        'local',
        tasks.hold,
        [holderLabel, ending === 'ERROR' ? 'fail' : 'succeed'],
        {
          deduplicationId: key,
          ...(ending === 'TIMED_OUT' ? { timeoutMs: 2000 } : {}),
        },
      );
      await started(holderLabel);

      const policy: EnqueueOptions = { deduplicationId: key, onDuplicate: 'replace', whenRunning: 'queue-next' };
      const first = await app.queues.enqueue('local', tasks.hold, [`${key}-next-1`], policy);
      expect(first.created).toBe(true);
      expect(first.workflowId).not.toBe(holder.workflowId);
      const second = await app.queues.enqueue('local', tasks.hold, [`${key}-next-2`], policy);
      expect({ workflowId: second.workflowId, created: second.created }).toEqual({
        workflowId: first.workflowId,
        created: false,
      });
      expect(await rowsFor('local', key)).toEqual([
        expect.objectContaining({ workflow_id: holder.workflowId, status: 'PENDING', active_deduplication_id: key }),
        expect.objectContaining({
          workflow_id: first.workflowId,
          status: 'ENQUEUED',
          inputs: JSON.stringify([`${key}-next-2`]),
          active_deduplication_id: null,
          next_deduplication_id: key,
          waiting: true,
        }),
      ]);

      if (ending === 'SUCCESS' || ending === 'ERROR') tasks.gate(holderLabel).open();
      if (ending === 'CANCELLED') await expect(app.queues.cancel(holder.workflowId)).resolves.toBe('CANCELLED');
      await waitForStatus(holder.workflowId, finalStatus);

      const run = await started(`${key}-next-2`);
      expect(run).toEqual({ label: `${key}-next-2`, workflowId: first.workflowId, attempt: 1 });
      expect(await rowOf(first.workflowId)).toMatchObject({
        status: 'PENDING',
        active_deduplication_id: key,
        next_deduplication_id: null,
        not_before_null: true,
      });
      expect(await rowOf(holder.workflowId)).toMatchObject({ status: finalStatus, active_deduplication_id: null });
      tasks.gate(`${key}-next-2`).open();
      await expect(first.getResult()).resolves.toBe(`${key}-next-2`);
      expect(tasks.ran(`${key}-next-1`)).toEqual([]);
      tasks.gate(holderLabel).open();
    });

    it('frees the follow-up slot when the waiting follow-up is cancelled', async () => {
      const key = 'cancel-follow-up';
      const holder = await app.queues.enqueue('local', tasks.hold, ['cancel-follow-up-holder'], {
        deduplicationId: key,
      });
      await started('cancel-follow-up-holder');
      const policy: EnqueueOptions = { deduplicationId: key, onDuplicate: 'replace', whenRunning: 'queue-next' };
      const first = await app.queues.enqueue('local', tasks.hold, ['cancelled-next'], policy);
      await expect(app.queues.cancel(first.workflowId)).resolves.toBe('CANCELLED');
      expect(await rowOf(first.workflowId)).toMatchObject({
        status: 'CANCELLED',
        next_deduplication_id: null,
        active_deduplication_id: null,
      });
      const second = await app.queues.enqueue('local', tasks.hold, ['second-next'], policy);
      expect(second.created).toBe(true);
      expect(second.workflowId).not.toBe(first.workflowId);
      tasks.gate('second-next').open();
      tasks.gate('cancel-follow-up-holder').open();
      await expect(holder.getResult()).resolves.toBe('cancel-follow-up-holder');
      await expect(second.getResult()).resolves.toBe('second-next');
      expect(tasks.ran('cancelled-next')).toEqual([]);
    });

    it('runs a follow-up queued behind a holder with a deduplication window once the window has ended', async () => {
      // The holder keeps its key for 1 s after it ends; the follow-up must take the key when the window ends.
      const key = 'promote-after-window';
      const holder = await app.queues.enqueue('local', tasks.hold, ['window-holder'], {
        deduplicationId: key,
        deduplicationWindowMs: 1000,
      });
      await started('window-holder');
      const followUp = await app.queues.enqueue('local', tasks.hold, ['window-next'], {
        deduplicationId: key,
        onDuplicate: 'replace',
        whenRunning: 'queue-next',
      });
      expect(followUp.created).toBe(true);
      tasks.gate('window-next').open();
      tasks.gate('window-holder').open();
      await expect(holder.getResult()).resolves.toBe('window-holder');

      await waitFor(
        async () =>
          (
            await pool.query(`SELECT now() >= dedup_expires_at AS over FROM ${table} WHERE workflow_id = $1`, [
              holder.workflowId,
            ])
          ).rows[0].over,
        { what: 'the window to end', intervalMs: 10 },
      );
      // Nobody else asks for the key: the follow-up must not wait for a caller to come along (it runs at once here).
      await waitForStatus(followUp.workflowId, 'SUCCESS', 3000).catch(() => undefined);
      expect(await rowOf(followUp.workflowId)).toMatchObject({ status: 'SUCCESS', next_deduplication_id: null });
    });

    it('does not rewrite the arguments of a holder that already ran and waits to retry: the latest call runs last', async () => {
      const key = 'replace-retrying';
      const holder = await app.queues.enqueue('local', tasks.retried, ['R', 1], { deduplicationId: key });
      await started('R');
      const policy: EnqueueOptions = { deduplicationId: key, onDuplicate: 'replace', whenRunning: 'queue-next' };
      const older = await app.queues.enqueue('local', tasks.retried, ['A', 0], policy);
      expect(older.created).toBe(true);

      // The first attempt fails: the holder waits ENQUEUED for its retry (60 s backoff), still holding the key.
      tasks.gate('R#1').open();
      await waitFor(
        async () =>
          (
            await pool.query(
              `SELECT status = 'ENQUEUED' AND failed_attempts = 1 AS waiting FROM ${table} WHERE workflow_id = $1`,
              [holder.workflowId],
            )
          ).rows[0].waiting,
        { what: 'the holder to wait for its retry' },
      );
      const latest = await app.queues.enqueue('local', tasks.retried, ['B', 0], policy);
      await app.queues.reschedule(holder.workflowId, { delayMs: 0 });
      await waitForStatus(holder.workflowId, 'SUCCESS');
      await waitForStatus(older.workflowId, 'SUCCESS');

      const runs = tasks.runs
        .filter((run) => run.workflowId === holder.workflowId || run.workflowId === older.workflowId)
        .map((run) => `${run.label}#${run.attempt}`);
      // The holder retries with its own arguments; the follow-up holds the latest call's and runs last.
      expect({ latestReturned: latest.workflowId, runs }).toEqual({
        latestReturned: older.workflowId,
        runs: ['R#1', 'R#2', 'B#1'],
      });
    });
  });

  describe('deduplication windows', () => {
    const expiry = async (workflowId: string) =>
      (
        await pool.query(
          `SELECT active_deduplication_id, status,
                  (extract(epoch FROM dedup_expires_at - completed_at) * 1000)::float8 AS window_ms
           FROM ${table} WHERE workflow_id = $1`,
          [workflowId],
        )
      ).rows[0];
    /** Whether the database's clock has reached the holder's expiry shifted by `offsetMs`. */
    const reached = async (workflowId: string, offsetMs = 0) =>
      (
        await pool.query(
          `SELECT now() >= dedup_expires_at + $2::float8 * interval '1 millisecond' AS reached FROM ${table} WHERE workflow_id = $1`,
          [workflowId, offsetMs],
        )
      ).rows[0].reached as boolean;

    async function finishedHolder(key: string, windowMs: number): Promise<string> {
      const handle = await app.queues.enqueue('local', tasks.echo, [key], {
        deduplicationId: key,
        deduplicationWindowMs: windowMs,
      });
      await expect(handle.getResult()).resolves.toBe(key);
      expect(await expiry(handle.workflowId)).toEqual({
        active_deduplication_id: key,
        status: 'SUCCESS',
        window_ms: windowMs,
      });
      return handle.workflowId;
    }

    it('keeps the key until exactly the end of the window, by the database clock', async () => {
      const key = 'window-exact';
      const holder = await finishedHolder(key, 2000);
      const attempt = () => app.queues.enqueue('local', tasks.echo, ['again'], { deduplicationId: key });

      await expect(attempt()).rejects.toMatchObject({
        name: 'QueueDeduplicatedError',
        existingWorkflowId: holder,
        deduplicationId: key,
      });
      await expect(
        app.queues.enqueue('local', tasks.echo, ['joined'], { deduplicationId: key, onDuplicate: 'return-existing' }),
      ).resolves.toMatchObject({
        workflowId: holder,
        created: false,
      });

      // Just before the end: the attempt and the check after it both happen while now() < dedup_expires_at.
      await waitFor(() => reached(holder, -400), { what: 'the last 400 ms of the window', intervalMs: 5 });
      const justBefore = await rejection(attempt());
      const foundBefore = await app.queues.findByDeduplicationId('local', key);
      expect(await reached(holder)).toBe(false);
      expect(justBefore).toBeInstanceOf(QueueDeduplicatedError);
      expect(justBefore).toMatchObject({ existingWorkflowId: holder });
      expect(foundBefore?.workflowId).toBe(holder);

      // Just after: the first attempt once now() >= dedup_expires_at creates a new workflow.
      await waitFor(() => reached(holder), { what: 'the end of the window', intervalMs: 2 });
      const after = await attempt();
      expect(after.created).toBe(true);
      expect(after.workflowId).not.toBe(holder);
      await expect(after.getResult()).resolves.toBe('again');
      expect((await expiry(holder)).active_deduplication_id).toBeNull();
    });

    it('findByDeduplicationId returns the holder during its window and undefined after', async () => {
      const key = 'window-find';
      const holder = await finishedHolder(key, 1000);
      const found = await app.queues.findByDeduplicationId('local', key);
      expect(found?.workflowId).toBe(holder);
      await expect(found?.getStatus()).resolves.toMatchObject({ status: 'SUCCESS', deduplicationId: key });
      await waitFor(() => reached(holder), { what: 'the end of the window', intervalMs: 5 });
      await expect(app.queues.findByDeduplicationId('local', key)).resolves.toBeUndefined();
      await expect(app.queues.enqueue('local', tasks.echo, ['next'], { deduplicationId: key })).resolves.toMatchObject({
        created: true,
      });
    });

    it('enqueueMany sees the window: a duplicate during it, created after it', async () => {
      const key = 'window-bulk';
      const holder = await finishedHolder(key, 1000);
      await expect(
        app.queues.enqueueMany('local', tasks.echo, [{ args: ['during'], options: { deduplicationId: key } }]),
      ).resolves.toEqual([{ status: 'duplicate', workflowId: holder }]);
      await waitFor(() => reached(holder), { what: 'the end of the window', intervalMs: 5 });
      const [after] = await app.queues.enqueueMany('local', tasks.echo, [
        { args: ['after'], options: { deduplicationId: key } },
      ]);
      expect(after).toEqual({ status: 'created', workflowId: expect.any(String) });
      expect(after.workflowId).not.toBe(holder);
    });

    it('concurrent enqueues after the window: one created, the others name it, none names the expired holder', async () => {
      const key = 'window-burst';
      const holder = await finishedHolder(key, 1000);
      await waitFor(() => reached(holder), { what: 'the end of the window', intervalMs: 5 });

      // Under load, concurrent enqueues reach the database together (group commit). To make that happen every time,
      // the table is held for a moment: two enqueues of other keys wait for it (the two statements in flight) and
      // the burst queues up behind them, so it goes to the database as one statement once the table is free. The
      // calls come from a worker-less application of their own, so that its waiting statements are easy to tell.
      const enqueuer = await startQueueApp(
        {
          schema,
          worker: false,
          connection: { url: databaseUrl(), poolSize: 4, applicationName: 'window-burst' },
          queues: [{ name: 'local' }],
        },
        [LocalTasks],
      );
      const locker = await pool.connect();
      let earlier: Array<Promise<unknown>> = [];
      let burst: Promise<Array<PromiseSettledResult<{ workflowId: string }>>>;
      try {
        await locker.query('BEGIN');
        await locker.query(`LOCK TABLE ${table} IN SHARE MODE`);
        const burstTasks = enqueuer.get(LocalTasks);
        earlier = [1, 2].map((n) =>
          enqueuer.queues.enqueue('local', burstTasks.echo, [`earlier-${n}`], {
            deduplicationId: `window-burst-earlier-${n}`,
          }),
        );
        await waitFor(async () => (await activeTableLockWaits(pool, schema, 'window-burst')) >= 2, {
          what: 'two enqueues to wait for the table',
        });
        burst = Promise.allSettled(
          Array.from({ length: 20 }, () =>
            enqueuer.queues.enqueue('local', burstTasks.hold, ['window-burst-new-holder'], { deduplicationId: key }),
          ),
        );
      } finally {
        await locker.query('COMMIT');
        locker.release();
      }
      let attempts: Array<PromiseSettledResult<{ workflowId: string }>>;
      try {
        await Promise.all(earlier);
        attempts = await burst;
      } finally {
        await enqueuer.close();
      }
      tasks.gate('window-burst-new-holder').open();

      const created = attempts.flatMap((attempt) => (attempt.status === 'fulfilled' ? [attempt.value.workflowId] : []));
      const named = attempts.flatMap((attempt) =>
        attempt.status === 'rejected' ? [(attempt.reason as QueueDeduplicatedError).existingWorkflowId] : [],
      );
      expect({
        created: created.length,
        namesExpiredHolder: named.includes(holder),
        namedHolders: [...new Set(named)],
      }).toEqual({
        created: 1,
        namesExpiredHolder: false,
        namedHolders: created,
      });
    });

    it('releaseKeyOnError frees the key as soon as the workflow fails; without it the failed holder keeps it', async () => {
      const released = await app.queues.enqueue('local', tasks.fail, ['boom'], {
        deduplicationId: 'window-error-released',
        deduplicationWindowMs: 60_000,
        releaseKeyOnError: true,
      });
      await expect(released.getResult()).rejects.toMatchObject({ name: 'WorkflowFailedError' });
      expect(await rowOf(released.workflowId)).toMatchObject({ status: 'ERROR', active_deduplication_id: null });
      await expect(app.queues.findByDeduplicationId('local', 'window-error-released')).resolves.toBeUndefined();
      await expect(
        app.queues.enqueue('local', tasks.echo, ['retry'], { deduplicationId: 'window-error-released' }),
      ).resolves.toMatchObject({ created: true });

      const kept = await app.queues.enqueue('local', tasks.fail, ['boom'], {
        deduplicationId: 'window-error-kept',
        deduplicationWindowMs: 60_000,
      });
      await expect(kept.getResult()).rejects.toMatchObject({ name: 'WorkflowFailedError' });
      expect(await rowOf(kept.workflowId)).toMatchObject({
        status: 'ERROR',
        active_deduplication_id: 'window-error-kept',
      });
      await expect(
        app.queues.enqueue('local', tasks.echo, ['retry'], { deduplicationId: 'window-error-kept' }),
      ).rejects.toMatchObject({
        name: 'QueueDeduplicatedError',
        existingWorkflowId: kept.workflowId,
      });

      // releaseKeyOnError only concerns failures: a success keeps its window.
      const succeeded = await app.queues.enqueue('local', tasks.echo, ['ok'], {
        deduplicationId: 'window-error-ok',
        deduplicationWindowMs: 60_000,
        releaseKeyOnError: true,
      });
      await succeeded.getResult();
      await expect(
        app.queues.enqueue('local', tasks.echo, ['again'], { deduplicationId: 'window-error-ok' }),
      ).rejects.toMatchObject({
        existingWorkflowId: succeeded.workflowId,
      });
    });
  });

  describe('seeing deduplication', () => {
    it('tells listeners about every hit with queue, key, holder and outcome, and counts hits per queue', async () => {
      const events: DeduplicationEvent[] = [];
      const unsubscribe = app.queues.onDeduplicated((event) => events.push(event));
      const before = app.queues.deduplicationCounts();

      const running = await app.queues.enqueue('local', tasks.hold, ['seen-running'], { deduplicationId: 'seen-1' });
      await started('seen-running');
      const delayed = await app.queues.enqueue('local', tasks.hold, ['seen-delayed'], {
        deduplicationId: 'seen-2',
        delayMs: 3_600_000,
      });
      const other = await app.queues.enqueue('local2', tasks.hold, ['seen-other'], {
        deduplicationId: 'seen-1',
        delayMs: 3_600_000,
      });
      expect(events).toEqual([]);

      await expect(
        app.queues.enqueue('local', tasks.hold, ['x'], { deduplicationId: 'seen-1' }),
      ).rejects.toBeInstanceOf(QueueDeduplicatedError);
      await app.queues.enqueue('local', tasks.hold, ['x'], {
        deduplicationId: 'seen-1',
        onDuplicate: 'return-existing',
      });
      const followUp = await app.queues.enqueue('local', tasks.hold, ['seen-next'], {
        deduplicationId: 'seen-1',
        onDuplicate: 'replace',
        whenRunning: 'queue-next',
      });
      await app.queues.enqueue('local', tasks.hold, ['seen-delayed-2'], {
        deduplicationId: 'seen-2',
        onDuplicate: 'replace',
      });
      await expect(
        app.queues.enqueue('local2', tasks.hold, ['x'], { deduplicationId: 'seen-1' }),
      ).rejects.toBeInstanceOf(QueueDeduplicatedError);
      const bulk = await app.queues.enqueueMany('local', tasks.hold, [
        { args: ['bulk-1'], options: { deduplicationId: 'seen-2', delayMs: 3_600_000 } },
        { args: ['bulk-2'], options: { deduplicationId: 'seen-3', delayMs: 3_600_000 } },
        { args: ['bulk-3'], options: { deduplicationId: 'seen-3', delayMs: 3_600_000 } },
      ]);
      expect(bulk.map((result) => result.status)).toEqual(['duplicate', 'created', 'duplicate']);

      expect(events).toEqual([
        { queueName: 'local', deduplicationId: 'seen-1', existingWorkflowId: running.workflowId, outcome: 'rejected' },
        {
          queueName: 'local',
          deduplicationId: 'seen-1',
          existingWorkflowId: running.workflowId,
          outcome: 'returned-existing',
        },
        {
          queueName: 'local',
          deduplicationId: 'seen-1',
          existingWorkflowId: running.workflowId,
          outcome: 'queued-next',
        },
        { queueName: 'local', deduplicationId: 'seen-2', existingWorkflowId: delayed.workflowId, outcome: 'replaced' },
        { queueName: 'local2', deduplicationId: 'seen-1', existingWorkflowId: other.workflowId, outcome: 'rejected' },
        { queueName: 'local', deduplicationId: 'seen-2', existingWorkflowId: delayed.workflowId, outcome: 'rejected' },
        { queueName: 'local', deduplicationId: 'seen-3', existingWorkflowId: bulk[1].workflowId, outcome: 'rejected' },
      ]);
      const after = app.queues.deduplicationCounts();
      expect((after.local ?? 0) - (before.local ?? 0)).toBe(6);
      expect((after.local2 ?? 0) - (before.local2 ?? 0)).toBe(1);

      // After unsubscribing: no more events, still counted. A throwing listener does not break the enqueue.
      unsubscribe();
      const removeThrowing = app.queues.onDeduplicated(() => {
        throw new Error('listener bug');
      });
      await expect(app.queues.enqueue('local', tasks.hold, ['x'], { deduplicationId: 'seen-1' })).rejects.toMatchObject(
        {
          name: 'QueueDeduplicatedError',
          existingWorkflowId: running.workflowId,
        },
      );
      removeThrowing();
      expect(events).toHaveLength(7);
      expect((app.queues.deduplicationCounts().local ?? 0) - (before.local ?? 0)).toBe(7);

      for (const id of [delayed.workflowId, other.workflowId, bulk[1].workflowId]) await app.queues.cancel(id);
      tasks.gate('seen-running').open();
      tasks.gate('seen-next').open();
      await expect(followUp.getResult()).resolves.toBe('seen-next');
    });
  });
});
