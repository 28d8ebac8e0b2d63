/**
 * Bulk enqueue: `QueueService.enqueueMany(queue, workflow, items)` gives one outcome per item (`created`,
 * `duplicate` naming the holder, `existing` for a workflowId used before) with the guarantees of single enqueue,
 * duplicates inside one call and across calls included. No worker runs here, so every holder keeps its key.
 * Concurrent bulk enqueues run in two real OS processes (child-policy-enqueuer.ts) released together over IPC.
 */
import { Injectable } from '@nestjs/common';
import {
  BulkEnqueueItem,
  BulkEnqueueResult,
  DeduplicationEvent,
  InvalidArgumentError,
  UnknownQueueError,
  Workflow,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { FixtureProcess, killFixtures, spawnFixture } from './fixtures/child-harness';
import type { BulkReport } from './fixtures/child-policy-enqueuer';
import { databaseUrl } from './support/database';
import { QueueApp, useQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';
import { activeTableLockWaits } from './support/lock-waits';

@Injectable()
class BulkTasks {
  @Workflow()
  async process(key: string, n: number): Promise<string> {
    return `${key}:${n}`;
  }
}

/** A small deterministic generator, so that a failure can be replayed. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1_664_525 + 1_013_904_223) >>> 0;
    return state / 2 ** 32;
  };
}

describe('enqueueMany', () => {
  const suite = useQueueApp(
    'bulk',
    { worker: false, connection: { url: databaseUrl(), poolSize: 4 }, queues: [{ name: 'bulk' }, { name: 'other' }] },
    [BulkTasks],
    { tasks: BulkTasks, beforeClose: killFixtures },
  );
  const { schema } = suite;
  const table = `"${schema}".workflows`;
  let pool: Pool;
  let app: QueueApp;
  let tasks: BulkTasks;

  beforeAll(() => ({ pool, app, tasks } = suite));

  const countRows = async (queue: string) =>
    (await pool.query(`SELECT count(*)::int AS count FROM ${table} WHERE queue_name = $1`, [queue])).rows[0]
      .count as number;
  const item = (key: string, n: number, options: BulkEnqueueItem['options'] = {}): BulkEnqueueItem => ({
    args: [key, n],
    options: { deduplicationId: key, ...options },
  });

  it('enqueues 10,000 items with 30% duplicates inside and across calls: 7,000 created, 3,000 naming their holder', async () => {
    const random = seeded(20_240_501);
    const pick = <T>(from: T[]) => from[Math.floor(random() * from.length)];

    // Call 1: 5,000 items, 4,000 keys; every fifth item repeats a key seen earlier in the call, alternately from
    // its own chunk of 1,000 (one statement) and from an earlier chunk (an earlier statement of the same call).
    const call1: BulkEnqueueItem[] = [];
    const keysFrom: string[][] = [[], [], [], [], []];
    let fresh = 0;
    for (let i = 0; i < 5000; i++) {
      const chunk = Math.floor(i / 1000);
      if (i % 5 === 4) {
        const earlier = keysFrom.slice(0, chunk).flat();
        const key = i % 10 === 4 || earlier.length === 0 ? pick(keysFrom[chunk]) : pick(earlier);
        call1.push(item(key, i));
      } else {
        const key = `key-${fresh++}`;
        keysFrom[chunk].push(key);
        call1.push(item(key, i));
      }
    }
    const call1Keys = keysFrom.flat();
    expect(new Set(call1.map((entry) => entry.options?.deduplicationId)).size).toBe(4000);

    // Call 2: 5,000 items; 2,000 repeat distinct keys of call 1, 3,000 are new.
    const shuffled = [...call1Keys];
    for (let i = shuffled.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [shuffled[i], shuffled[j]] = [shuffled[j], shuffled[i]];
    }
    const repeated = shuffled.slice(0, 2000);
    const call2: BulkEnqueueItem[] = [];
    for (let i = 0, r = 0; i < 5000; i++) {
      call2.push(i % 5 < 2 ? item(repeated[r++], 5000 + i) : item(`key-${fresh++}`, 5000 + i));
    }
    expect(fresh).toBe(7000);

    const events: DeduplicationEvent[] = [];
    const unsubscribe = app.queues.onDeduplicated((event) => events.push(event));
    const countedBefore = app.queues.deduplicationCounts().bulk ?? 0;
    const results1 = await app.queues.enqueueMany('bulk', tasks.process, call1);
    const results2 = await app.queues.enqueueMany('bulk', tasks.process, call2);
    unsubscribe();

    expect(results1).toHaveLength(5000);
    expect(results2).toHaveLength(5000);
    const all = [...call1, ...call2].map((entry, index) => ({ entry, result: [...results1, ...results2][index] }));

    // The first item of each key created its workflow; every later one is a duplicate naming that workflow.
    const holderOf = new Map<string, { workflowId: string; inputs: string }>();
    const wrong: string[] = [];
    for (const [index, { entry, result }] of all.entries()) {
      const key = entry.options?.deduplicationId as string;
      const holder = holderOf.get(key);
      if (!holder) {
        if (result.status !== 'created')
          wrong.push(`item ${index} (${key}, first of its key): ${JSON.stringify(result)}`);
        holderOf.set(key, { workflowId: result.workflowId, inputs: JSON.stringify(entry.args) });
      } else if (result.status !== 'duplicate' || result.workflowId !== holder.workflowId) {
        wrong.push(`item ${index} (${key}, repeat): ${JSON.stringify(result)}, holder ${holder.workflowId}`);
      }
    }
    expect(wrong.slice(0, 10)).toEqual([]);
    const tally = (results: BulkEnqueueResult[]) =>
      results.reduce<Record<string, number>>(
        (counts, result) => ({ ...counts, [result.status]: (counts[result.status] ?? 0) + 1 }),
        {},
      );
    expect(tally(results1)).toEqual({ created: 4000, duplicate: 1000 });
    expect(tally(results2)).toEqual({ created: 3000, duplicate: 2000 });
    expect(
      new Set(
        [...results1, ...results2].filter((result) => result.status === 'created').map((result) => result.workflowId),
      ).size,
    ).toBe(7000);

    // The database holds exactly one workflow per key: the first item's, with its arguments.
    expect(await countRows('bulk')).toBe(7000);
    const { rows } = await pool.query(
      `SELECT deduplication_id, workflow_id, inputs::text AS inputs, status, active_deduplication_id FROM ${table} WHERE queue_name = 'bulk'`,
    );
    const stored = new Map(rows.map((row) => [row.deduplication_id as string, row]));
    expect(stored.size).toBe(7000);
    const mismatched = [...holderOf].filter(([key, holder]) => {
      const row = stored.get(key);
      return (
        !row ||
        row.workflow_id !== holder.workflowId ||
        row.inputs !== holder.inputs ||
        row.status !== 'ENQUEUED' ||
        row.active_deduplication_id !== key
      );
    });
    expect(mismatched.slice(0, 5)).toEqual([]);

    // Every duplicate was seen as a deduplication hit.
    expect(events).toHaveLength(3000);
    const unexpectedEvents = events.filter(
      (event) =>
        event.queueName !== 'bulk' ||
        event.outcome !== 'rejected' ||
        holderOf.get(event.deduplicationId)?.workflowId !== event.existingWorkflowId,
    );
    expect(unexpectedEvents.slice(0, 5)).toEqual([]);
    expect((app.queues.deduplicationCounts().bulk ?? 0) - countedBefore).toBe(3000);
  });

  it("answers 'existing' for workflowIds enqueued by an earlier call, and keeps those workflows", async () => {
    const first = await app.queues.enqueueMany('other', tasks.process, [
      item('wf-key-1', 1, { workflowId: 'bulk-wf-1' }),
      item('wf-key-2', 2, { workflowId: 'bulk-wf-2' }),
      { args: ['no-key', 3], options: { workflowId: 'bulk-wf-3' } },
    ]);
    expect(first).toEqual([
      { status: 'created', workflowId: 'bulk-wf-1' },
      { status: 'created', workflowId: 'bulk-wf-2' },
      { status: 'created', workflowId: 'bulk-wf-3' },
    ]);
    const second = await app.queues.enqueueMany('other', tasks.process, [
      item('wf-key-1', 10, { workflowId: 'bulk-wf-1' }),
      item('wf-key-other', 20, { workflowId: 'bulk-wf-2' }),
      { args: ['no-key', 30], options: { workflowId: 'bulk-wf-3' } },
      item('wf-key-4', 40, { workflowId: 'bulk-wf-4' }),
      item('wf-key-1', 50, { workflowId: 'bulk-wf-5' }),
    ]);
    expect(second).toEqual([
      { status: 'existing', workflowId: 'bulk-wf-1' },
      { status: 'existing', workflowId: 'bulk-wf-2' },
      { status: 'existing', workflowId: 'bulk-wf-3' },
      { status: 'created', workflowId: 'bulk-wf-4' },
      { status: 'duplicate', workflowId: 'bulk-wf-1' },
    ]);
    const { rows } = await pool.query(
      `SELECT workflow_id, inputs::text AS inputs FROM ${table} WHERE queue_name = 'other' ORDER BY workflow_id`,
    );
    expect(rows).toEqual([
      { workflow_id: 'bulk-wf-1', inputs: '["wf-key-1",1]' },
      { workflow_id: 'bulk-wf-2', inputs: '["wf-key-2",2]' },
      { workflow_id: 'bulk-wf-3', inputs: '["no-key",3]' },
      { workflow_id: 'bulk-wf-4', inputs: '["wf-key-4",40]' },
    ]);
  });

  it('refuses invalid items before writing anything, naming the item', async () => {
    const before = await countRows('other');
    const many = (at: number, bad: BulkEnqueueItem) =>
      Array.from({ length: 10_000 }, (_, n) => (n === at ? bad : item(`invalid-${n}`, n)));
    const refusal = async (promise: Promise<unknown>) =>
      promise.then(
        () => undefined,
        (error: unknown) => error,
      );

    const bigInt = await refusal(
      app.queues.enqueueMany('other', tasks.process, many(5000, { args: ['big', BigInt(1)] })),
    );
    expect(bigInt).toBeInstanceOf(InvalidArgumentError);
    expect(bigInt).toMatchObject({ field: 'items[5000].args[1]', message: expect.stringContaining('BigInt') });

    await expect(
      app.queues.enqueueMany('other', tasks.process, many(7, { args: ['x', 7], options: { deduplicationId: '' } })),
    ).rejects.toMatchObject({
      name: 'InvalidArgumentError',
      field: 'items[7].options.deduplicationId',
    });
    await expect(
      app.queues.enqueueMany('other', tasks.process, many(9999, { args: 'not an array' as unknown as unknown[] })),
    ).rejects.toMatchObject({
      name: 'InvalidArgumentError',
      field: 'items[9999].args',
    });
    await expect(
      app.queues.enqueueMany('other', tasks.process, [
        item('same-id-a', 1, { workflowId: 'bulk-same' }),
        item('same-id-b', 2, { workflowId: 'bulk-same' }),
      ]),
    ).rejects.toMatchObject({ name: 'InvalidArgumentError', field: 'items[1].options.workflowId' });
    await expect(
      app.queues.enqueueMany('other', tasks.process, 'nope' as unknown as BulkEnqueueItem[]),
    ).rejects.toMatchObject({
      name: 'InvalidArgumentError',
      field: 'items',
    });
    await expect(app.queues.enqueueMany('nowhere', tasks.process, [item('x', 1)])).rejects.toBeInstanceOf(
      UnknownQueueError,
    );

    expect(await countRows('other')).toBe(before);
    expect(await countRows('nowhere')).toBe(0);
  });

  it('generates time-ordered workflow IDs (UUID version 7): an ID made later sorts after one made earlier', async () => {
    const before = Date.now();
    const made: string[] = [];
    for (let call = 0; call < 3; call++) {
      const results = await app.queues.enqueueMany(
        'bulk',
        tasks.process,
        Array.from({ length: 2000 }, (_, n) => ({ args: [`ordered-${call}`, n] })),
      );
      made.push(...results.map((result) => result.workflowId));
    }
    const after = Date.now();
    expect(made).toHaveLength(6000);
    expect(
      made.filter((id) => !/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(id)),
    ).toEqual([]);
    expect(made.filter((id, n) => n > 0 && id <= made[n - 1])).toEqual([]);
    const millisOf = (id: string) => parseInt(id.replace(/-/g, '').slice(0, 12), 16);
    expect(millisOf(made[0])).toBeGreaterThanOrEqual(before);
    expect(millisOf(made[made.length - 1])).toBeLessThanOrEqual(after + 5);
  });

  describe('concurrent calls from two processes with overlapping keys', () => {
    let children: FixtureProcess[] = [];
    let round = 0;

    beforeAll(async () => {
      // A loaded database, simulated: each inserted row of the opposite-order race takes a millisecond more (a test-owned
      // trigger), so that two statements started together are still running when their keys meet.
      await pool.query(`
        CREATE FUNCTION "${schema}".slow_race_insert() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          PERFORM pg_sleep(0.001);
          RETURN NEW;
        END $$;
        CREATE TRIGGER test_slow_race_insert BEFORE INSERT ON "${schema}".workflow_queue
          FOR EACH ROW WHEN (NEW.deduplication_id LIKE 'opposite-order-%') EXECUTE FUNCTION "${schema}".slow_race_insert();
      `);
      children = ['a', 'b'].map((name) =>
        spawnFixture('child-policy-enqueuer.ts', `bulk-${name}`, { SCHEMA: schema, CHILD_NAME: name, QUEUES: 'bulk' }),
      );
      await Promise.all(children.map((child) => child.message('ready')));
    });

    afterAll(async () => {
      for (const child of children) if (!child.hasEnded) child.send({ type: 'stop' });
      await Promise.all(children.map((child) => child.waitForExit(10_000).catch(() => undefined)));
    });

    /** Process a enqueues keys 0..599, process b keys 300..899 (300 shared), released together. */
    async function race(prefix: string, reverseB: boolean) {
      round += 1;
      const keys = Array.from({ length: 900 }, (_, n) => `${prefix}-${String(n).padStart(3, '0')}`);
      const forA = keys.slice(0, 600);
      const forB = reverseB ? keys.slice(300).reverse() : keys.slice(300);
      // Both statements must run at the same time, as under load: the table is held until both wait for it, then let
      // go, so that they start together.
      const locker = await pool.connect();
      try {
        await locker.query('BEGIN');
        await locker.query(`LOCK TABLE ${table} IN SHARE MODE`);
        children[0].send({ type: 'bulk', round, queue: 'bulk', keys: forA });
        children[1].send({ type: 'bulk', round, queue: 'bulk', keys: forB });
        await waitFor(async () => (await activeTableLockWaits(pool, schema, 'policy-enqueuer-%')) >= 2, {
          what: 'both bulk statements to wait for the table',
        });
      } finally {
        await locker.query('COMMIT');
        locker.release();
      }
      const [a, b] = await Promise.all(
        children.map((child) => child.message<BulkReport>('bulk-results', { round }, 45_000)),
      );
      expect({ a: a.error, b: b.error }).toEqual({ a: undefined, b: undefined });

      const outcomes = [
        ...forA.map((key, n) => ({ key, by: 'a', ...(a.results as BulkEnqueueResult[])[n] })),
        ...forB.map((key, n) => ({ key, by: 'b', ...(b.results as BulkEnqueueResult[])[n] })),
      ];
      const created = outcomes.filter((outcome) => outcome.status === 'created');
      expect(created).toHaveLength(900);
      expect(new Set(created.map((outcome) => outcome.key)).size).toBe(900);
      const creatorOf = new Map(created.map((outcome) => [outcome.key, outcome.workflowId]));
      const duplicates = outcomes.filter((outcome) => outcome.status !== 'created');
      expect(duplicates).toHaveLength(300);
      expect(
        duplicates.filter(
          (outcome) => outcome.status !== 'duplicate' || outcome.workflowId !== creatorOf.get(outcome.key),
        ),
      ).toEqual([]);

      const { rows } = await pool.query(
        `SELECT deduplication_id, workflow_id, inputs::text AS inputs FROM ${table} WHERE queue_name = 'bulk' AND deduplication_id LIKE $1`,
        [`${prefix}-%`],
      );
      expect(rows).toHaveLength(900);
      for (const row of rows) expect(row.workflow_id).toBe(creatorOf.get(row.deduplication_id));
    }

    it('creates exactly one workflow per key when both list the keys in the same order', async () => {
      await race('same-order', false);
    });

    it('creates exactly one workflow per key when they list the keys in opposite orders', async () => {
      await race('opposite-order', true);
    });
  });
});
