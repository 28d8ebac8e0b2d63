/**
 * `onDuplicate: 'supersede'` raced from two OS processes: each enqueuing process (child-policy-enqueuer.ts) fires 5
 * concurrent supersedes of one key, released together over IPC, while the key's holder runs in a worker process
 * (child-policy-worker.ts; its body records 'aborted' when its signal fires). A separate connection samples the key
 * every few milliseconds meanwhile. Exactly one workflow holds the key at the end, every sample saw at most one,
 * the `supersedes` / `superseded_by` columns chain all 11 workflows from the first holder to the last, and every body
 * that started and was superseded saw its signal abort, in the worker process.
 */
import { Pool } from 'pg';
import { FixtureProcess, killFixtures } from './fixtures/child-harness';
import type { RoundReport } from './fixtures/child-policy-enqueuer';
import { PolicyTasks, policyTablesSql } from './fixtures/child-policy-tasks';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { PolicyProcesses, startPolicyProcesses } from './support/policy-processes';
import { waitFor } from './support/wait-for';
import { sampleKeyHolders } from './support/key-holders';

const PER_PROCESS = 5;
const ROUNDS = 3;

const schema = uniqueSchema('supersede_race');
const view = `"${schema}".workflows`;
let pool: Pool;
let parent: QueueApp;
let processes: PolicyProcesses | undefined;
let enqueuers: FixtureProcess[] = [];

beforeAll(async () => {
  pool = testPool();
  parent = await startQueueApp(
    { schema, worker: false, connection: { url: databaseUrl(), poolSize: 3 }, queues: [{ name: 'live' }] },
    [PolicyTasks],
  );
  await pool.query(policyTablesSql(schema));
  processes = await startPolicyProcesses(pool, schema, 'live');
  enqueuers = processes.enqueuers;
});

afterAll(async () => {
  await processes?.stop();
  await killFixtures();
  await parent?.close();
  await dropSchema(pool, schema);
  await pool.end();
});

it.each(Array.from({ length: ROUNDS }, (_, n) => n + 1))(
  'round %i: 10 concurrent supersedes from two processes leave exactly one holder, the running one aborted',
  async (round) => {
    const key = `race-${round}`;
    const holderLabel = `${key}-holder`;
    const holder = await parent.queues.enqueue('live', parent.get(PolicyTasks).hold, [holderLabel], {
      deduplicationId: key,
      workflowId: holderLabel,
    });
    await waitFor(
      async () =>
        (
          await pool.query(`SELECT 1 FROM "${schema}".policy_events WHERE kind = 'started' AND label = $1`, [
            holderLabel,
          ])
        ).rowCount === 1,
      { what: 'the holder to run in the worker process' },
    );

    const stop = await sampleKeyHolders(schema, 'live', key, 2);
    for (const child of enqueuers) {
      child.send({
        type: 'go',
        round,
        queue: 'live',
        keys: Array.from({ length: PER_PROCESS }, () => key),
        options: { onDuplicate: 'supersede' },
      });
    }
    const replies = await Promise.all(enqueuers.map((child) => child.message<RoundReport>('results', { round })));
    const sampled = await stop();
    const results = replies.flatMap((reply) => reply.results);

    expect(results.filter((result) => result.error)).toEqual([]);
    expect(results.map((result) => result.created)).toEqual(Array(2 * PER_PROCESS).fill(true));
    expect(sampled.max).toBe(1);
    expect(sampled.samples).toBeGreaterThan(0);

    const { rows } = await pool.query(
      `SELECT workflow_id, status, active_deduplication_id, superseded_by, supersedes FROM ${view}
       WHERE queue_name = 'live' AND deduplication_id = $1`,
      [key],
    );
    expect(rows).toHaveLength(2 * PER_PROCESS + 1);
    const unfinished = rows.filter((row) => row.status === 'ENQUEUED' || row.status === 'PENDING');
    expect(unfinished).toHaveLength(1);
    expect(unfinished[0]).toMatchObject({ active_deduplication_id: key, superseded_by: null });
    expect(rows.filter((row) => row.status === 'CANCELLED')).toHaveLength(2 * PER_PROCESS);

    // One chain: from the first holder, each workflow superseded exactly the one before it.
    const byId = new Map(rows.map((row) => [row.workflow_id as string, row]));
    const chain: string[] = [];
    for (let at: string | null = unfinished[0].workflow_id; at; at = byId.get(at)?.supersedes ?? null) chain.push(at);
    expect(chain).toHaveLength(rows.length);
    expect(chain[chain.length - 1]).toBe(holder.workflowId);
    for (const [index, id] of chain.entries()) {
      if (index > 0) expect(byId.get(id)?.superseded_by).toBe(chain[index - 1]);
    }

    // Every superseded body that started, the first holder first among them, saw its signal abort.
    const events = async (kind: string) =>
      new Set(
        (await pool.query(`SELECT workflow_id FROM "${schema}".policy_events WHERE kind = $1`, [kind])).rows.map(
          (row) => row.workflow_id as string,
        ),
      );
    const startedIds = [...(await events('started'))].filter((id) => byId.get(id)?.status === 'CANCELLED');
    expect(startedIds).toContain(holder.workflowId);
    await waitFor(
      async () => {
        const aborted = await events('aborted');
        return startedIds.every((id) => aborted.has(id));
      },
      { what: 'every superseded body that started to see its signal abort' },
    );
    const finishedIds = await events('finished');
    expect(startedIds.filter((id) => finishedIds.has(id))).toEqual([]);

    await parent.queues.cancel(unfinished[0].workflow_id);
  },
);
