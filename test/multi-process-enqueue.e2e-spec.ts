import type { Pool } from 'pg';
import type { EnqueueResult } from './fixtures/child-enqueuer';
import { FixtureProcess, killFixtures, spawnFixture } from './fixtures/child-harness';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';

/** Enqueues per process and round; two processes fire at once, so 2 * PER_PROCESS calls compete for one ID. */
const PER_PROCESS = 100;
const KEY = 'shared-key';

describe('deduplication across OS processes', () => {
  const schema = uniqueSchema('mproc');
  let pool: Pool;
  let app: QueueApp;
  let children: FixtureProcess[] = [];

  beforeAll(async () => {
    pool = testPool();
    // Migrates the schema first, and cancels holders between rounds.
    app = await startQueueApp({ schema, worker: false });
    children = ['a', 'b'].map((name) => spawnFixture('child-enqueuer.ts', name, { SCHEMA: schema, CHILD_NAME: name }));
    await Promise.all(children.map((child) => child.message('ready')));
  });

  afterAll(async () => {
    await killFixtures();
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  const rowsFor = async (deduplicationId: string) =>
    (
      await pool.query(
        `SELECT workflow_id, status FROM "${schema}".workflows WHERE deduplication_id = $1 ORDER BY seq`,
        [deduplicationId],
      )
    ).rows;

  /** Releases both children at once and collects what each of their enqueues did. */
  async function fireRound(round: number): Promise<EnqueueResult[]> {
    for (const child of children) child.send({ type: 'go', round, deduplicationId: KEY, count: PER_PROCESS });
    const replies = await Promise.all(
      children.map((child) => child.message<{ type: 'results'; results: EnqueueResult[] }>('results', { round })),
    );
    for (const reply of replies) expect(reply.results).toHaveLength(PER_PROCESS);
    return replies.flatMap((reply) => reply.results);
  }

  /** Asserts exactly one call created a workflow and every other one was told that workflow holds the ID. */
  function expectOneCreated(results: EnqueueResult[]): string {
    expect(results.filter((result) => result.error !== undefined)).toEqual([]);
    const created = results.filter((result) => result.created !== undefined);
    expect(created).toHaveLength(1);
    const holder = created[0].created as string;
    expect(holder).toBe(created[0].workflowId);
    const deduplicated = results.filter((result) => result.deduplicated !== undefined);
    expect(deduplicated).toHaveLength(2 * PER_PROCESS - 1);
    expect(new Set(deduplicated.map((result) => result.deduplicated))).toEqual(new Set([holder]));
    expect(new Set(deduplicated.map((result) => result.name))).toEqual(new Set(['QueueDeduplicatedError']));
    return holder;
  }

  it(`creates exactly one workflow from ${2 * PER_PROCESS} concurrent enqueues with one ID in two processes`, async () => {
    const holder = expectOneCreated(await fireRound(1));

    expect(await rowsFor(KEY)).toEqual([{ workflow_id: holder, status: 'ENQUEUED' }]);
    const { rows } = await pool.query(`SELECT count(*)::int AS count FROM "${schema}".workflows`);
    expect(rows[0].count).toBe(1);
  });

  it('lets the processes take the ID again, exactly once, after its holder is cancelled', async () => {
    const [previous] = await rowsFor(KEY);
    expect(previous).toMatchObject({ status: 'ENQUEUED' });
    await expect(app.queues.cancel(previous.workflow_id)).resolves.toBe('CANCELLED');

    const holder = expectOneCreated(await fireRound(2));

    expect(holder).not.toBe(previous.workflow_id);
    expect(holder).toMatch(/^[ab]-r2-\d+$/);
    expect(await rowsFor(KEY)).toEqual([
      { workflow_id: previous.workflow_id, status: 'CANCELLED' },
      { workflow_id: holder, status: 'ENQUEUED' },
    ]);
  });

  it('closes both enqueuing processes cleanly', async () => {
    for (const child of children) child.send({ type: 'stop' });
    const exits = await Promise.all(children.map((child) => child.waitForExit()));
    expect(exits).toEqual([
      { code: 0, signal: null },
      { code: 0, signal: null },
    ]);
  });
});
