/**
 * `onDuplicate: 'send'` raced from two OS processes: each enqueuing process (child-policy-enqueuer.ts) fires bursts
 * of calls over one key, while the holders run in a worker process (child-policy-worker.ts): `PolicyTasks.collect`
 * receives duplicates until none comes for 300 ms, so holders end between and during the bursts, some of them as a
 * message reaches them. A separate connection samples the key all along. Every value (each call's label) reaches
 * exactly one workflow, as its arguments or as a received message; there is never a second holder; nothing is left.
 */
import { Pool } from 'pg';
import { FixtureProcess, killFixtures } from './fixtures/child-harness';
import type { RoundReport } from './fixtures/child-policy-enqueuer';
import { PolicyTasks, policyTablesSql } from './fixtures/child-policy-tasks';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { PolicyProcesses, startPolicyProcesses } from './support/policy-processes';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';
import { sampleKeyHolders } from './support/key-holders';

const BURSTS = 6;
const PER_BURST = 5;
const KEY = 'inbox';

const schema = uniqueSchema('send_race');
let pool: Pool;
let parent: QueueApp;
let processes: PolicyProcesses | undefined;
let enqueuers: FixtureProcess[] = [];

beforeAll(async () => {
  pool = testPool();
  parent = await startQueueApp(
    { schema, worker: false, connection: { url: databaseUrl(), poolSize: 2 }, queues: [{ name: 'live' }] },
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

it(`${2 * BURSTS * PER_BURST} calls from two processes over one key: every value reaches exactly one holder`, async () => {
  const stop = await sampleKeyHolders(schema, 'live', KEY, 3);
  const labels: string[] = [];
  const errors: string[] = [];
  for (let round = 1; round <= BURSTS; round++) {
    enqueuers.forEach((child) =>
      child.send({
        type: 'go',
        round,
        queue: 'live',
        workflow: 'collect',
        keys: Array.from({ length: PER_BURST }, () => KEY),
        options: { onDuplicate: 'send' },
        spacingMs: 5,
      }),
    );
    const replies = await Promise.all(enqueuers.map((child) => child.message<RoundReport>('results', { round })));
    for (const result of replies.flatMap((reply) => reply.results)) {
      labels.push(result.label);
      if (result.error) errors.push(`${result.label}: ${result.error.name}: ${result.error.message}`);
    }
    // A pause about as long as a holder waits for more: some holders end now, some as the next burst begins.
    await new Promise((resolve) => setTimeout(resolve, 150 * round));
  }

  await waitFor(
    async () => {
      const { rows } = await pool.query(
        `SELECT (SELECT count(*)::int FROM "${schema}".workflow_queue
                 WHERE queue_name = 'live' AND status IN ('ENQUEUED', 'PENDING', 'WAITING')) AS unfinished,
                (SELECT count(*)::int FROM "${schema}".workflow_messages
                 WHERE queue_name = 'live' AND received_at IS NULL) AS unreceived`,
      );
      if (rows[0].unfinished + rows[0].unreceived > 0) throw new Error(JSON.stringify(rows[0]));
      return true;
    },
    { what: 'every holder to finish with nothing left unreceived', timeoutMs: 30_000 },
  );
  const sampled = await stop();

  const { rows } = await pool.query<{ kind: string; label: string; workflow_id: string }>(
    `SELECT kind, label, workflow_id FROM "${schema}".policy_events WHERE kind IN ('started', 'received') ORDER BY seq`,
  );
  const reached = rows.map((row) => row.label).sort();
  const holders = new Set(rows.filter((row) => row.kind === 'started').map((row) => row.workflow_id));
  process.stdout.write(
    `[send-race] ${labels.length} calls, ${holders.size} holders, ` +
      `${rows.filter((row) => row.kind === 'received').length} received as messages, ${sampled.samples} samples\n`,
  );
  expect(errors).toEqual([]);
  expect(labels).toHaveLength(2 * BURSTS * PER_BURST);
  expect(reached).toEqual([...labels].sort());
  expect(sampled.max).toBe(1);
  expect(sampled.samples).toBeGreaterThan(10);
  const { rows: statuses } = await pool.query(
    `SELECT status, count(*)::int AS n FROM "${schema}".workflows WHERE queue_name = 'live' GROUP BY status`,
  );
  expect(statuses).toEqual([{ status: 'SUCCESS', n: holders.size }]);
});
