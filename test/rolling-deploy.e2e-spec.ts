/**
 * A rolling deploy across real processes (issue 31, item 7): an old build (version 1 of `Orders.fulfil`) and a new
 * build (version 2) of one application against one database. Runs enqueued while only old processes live record
 * version 1 and run on them; once a new process lives, new runs record version 2 and start on it, while the version-1
 * runs in flight finish on the old processes. An old process killed with SIGKILL has its runs recovered, and they
 * are claimed by the other old process only: a recovery never crosses versions. `listVersions()` tells when the old
 * build can go, and stopping it then strands nothing.
 */
import { QueueService } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { FixtureProcess, killFixtures, spawnFixture } from './fixtures/child-harness';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

const LEASE_MS = 1500;

describe('a rolling deploy from version 1 to version 2 of a workflow, across processes', () => {
  const schema = uniqueSchema('rolling');
  let pool: Pool;
  let producer: QueueApp;
  let queues: QueueService;
  const builds = new Map<string, FixtureProcess>();

  const startBuild = async (executor: string, build: 'v1' | 'v2') => {
    const child = spawnFixture('child-versioned-worker.ts', executor, {
      SCHEMA: schema,
      EXECUTOR: executor,
      BUILD: build,
      LEASE_MS: String(LEASE_MS),
    });
    builds.set(executor, child);
    await child.message('ready', {}, 60_000);
  };
  const enqueue = async (order: string) =>
    (await queues.enqueue('orders', 'Orders.fulfil', [order], { workflowId: order, deduplicationId: order }))
      .workflowId;
  /** The runs recorded for an order: `<build> <executor> v<version>`, in order. */
  const runsOf = async (order: string) =>
    (
      await pool.query<{ build: string; executor_id: string; version: number }>(
        `SELECT build, executor_id, version FROM "${schema}".runs WHERE workflow_id = $1 ORDER BY id`,
        [order],
      )
    ).rows.map((row) => `${row.build} ${row.executor_id} v${row.version}`);
  const release = (...orders: string[]) =>
    pool.query(`INSERT INTO "${schema}".release (order_id) SELECT unnest($1::text[])`, [orders]);
  const started = (order: string) =>
    waitFor(async () => (await runsOf(order)).length > 0, { what: `${order} to start`, timeoutMs: 20_000 });

  beforeAll(async () => {
    pool = testPool();
    // The producer has no code of the workflow: it enqueues by name, at the version the live executors register.
    producer = await startQueueApp({
      schema,
      worker: false,
      queues: [{ name: 'orders' }],
      externalWorkflows: ['Orders.fulfil'],
    });
    queues = producer.queues;
    await pool.query(`
      CREATE TABLE "${schema}".runs (id serial PRIMARY KEY, build text, workflow_id text, executor_id text, version int);
      CREATE TABLE "${schema}".release (order_id text PRIMARY KEY);`);
  }, 60_000);

  afterAll(async () => {
    await killFixtures();
    await producer?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('runs version-1 runs on the old processes while the new process starts version-2 runs', async () => {
    // old-1 alone takes the first two, so that the next test has runs of old-1 to recover (claims race otherwise).
    await startBuild('old-1', 'v1');
    const before = [];
    for (const order of ['a1', 'a2']) before.push(await enqueue(order));
    for (const order of before) await started(order);
    await startBuild('old-2', 'v1');
    for (const order of ['a3', 'a4']) before.push(await enqueue(order));
    for (const order of before) await started(order);

    await startBuild('new-1', 'v2');
    const after = [];
    for (const order of ['b1', 'b2', 'b3']) after.push(await enqueue(order));
    for (const order of after) await started(order);

    for (const order of before) expect(await runsOf(order)).toEqual([expect.stringMatching(/^v1 old-[12] v1$/)]);
    for (const order of after) expect(await runsOf(order)).toEqual(['v2 new-1 v2']);
    expect((await queues.listVersions()).filter((v) => v.workflowName === 'Orders.fulfil')).toEqual([
      { workflowName: 'Orders.fulfil', version: 1, unfinished: 4, executors: 2 },
      { workflowName: 'Orders.fulfil', version: 2, unfinished: 3, executors: 1 },
    ]);
  }, 120_000);

  it('recovers the runs of a killed old process on the other old process only, never on the new one', async () => {
    const ofOld1 = [];
    for (const order of ['a1', 'a2', 'a3', 'a4']) {
      if ((await runsOf(order))[0].includes('old-1')) ofOld1.push(order);
    }
    expect(ofOld1.length).toBeGreaterThan(0);
    builds.get('old-1')!.child.kill('SIGKILL');
    await builds.get('old-1')!.ended;
    for (const order of ofOld1) {
      await waitFor(async () => (await runsOf(order)).length === 2, {
        what: `${order} to be recovered`,
        timeoutMs: 20_000,
      });
      expect(await runsOf(order)).toEqual([`v1 old-1 v1`, 'v1 old-2 v1']);
    }

    await release('a1', 'a2', 'a3', 'a4', 'b1', 'b2', 'b3');
    for (const order of ['a1', 'a2', 'a3', 'a4']) {
      expect(await (await queues.retrieve(order)).getResult({ timeoutMs: 20_000 })).toBe(`v1 ${order}`);
    }
    for (const order of ['b1', 'b2', 'b3']) {
      expect(await (await queues.retrieve(order)).getResult({ timeoutMs: 20_000 })).toBe(`v2 ${order}`);
    }
    const crossed = await pool.query(
      `SELECT r.workflow_id FROM "${schema}".runs AS r JOIN "${schema}".workflows AS w USING (workflow_id)
       WHERE r.version <> w.workflow_version OR r.build <> 'v' || w.workflow_version`,
    );
    expect(crossed.rows).toEqual([]);
  }, 120_000);

  it('says when the old build can go: no unfinished version-1 run; stopping it then strands nothing', async () => {
    expect((await queues.listVersions()).find((v) => v.workflowName === 'Orders.fulfil' && v.version === 1)).toEqual({
      workflowName: 'Orders.fulfil',
      version: 1,
      unfinished: 0,
      executors: 1,
    });
    builds.get('old-2')!.child.kill('SIGTERM');
    expect(await builds.get('old-2')!.ended).toEqual({ code: 0, signal: null });
    await enqueue('c1');
    await started('c1');
    expect(await runsOf('c1')).toEqual(['v2 new-1 v2']);
    await release('c1');
    expect(await (await queues.retrieve('c1')).getResult({ timeoutMs: 20_000 })).toBe('v2 c1');
    expect((await queues.listVersions()).filter((v) => v.workflowName === 'Orders.fulfil')).toEqual([
      { workflowName: 'Orders.fulfil', version: 2, unfinished: 0, executors: 1 },
    ]);
  }, 60_000);
});
