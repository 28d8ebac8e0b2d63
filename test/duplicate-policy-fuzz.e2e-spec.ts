/**
 * A 4-process fuzz of the duplicate policies: three enqueuing processes (child-policy-enqueuer.ts) fire streams of
 * calls over a few keys, each call with a policy drawn from a seeded generator (every policy, `supersede`, `send`, a capped
 * debounce and `requireSameArgs` included), while a worker process (child-policy-worker.ts) runs the holders, half of
 * which finish at once and half when the round is over. A separate connection samples the invariants all along:
 * never two unfinished holders of one key, never two follow-ups, never an unfinished workflow that holds neither the
 * key nor its follow-up slot. At the end every workflow of the keys finishes (nothing is left waiting forever) and
 * every call either named a workflow of its key or failed with a deduplication error. The figures are printed.
 */
import { Client, Pool } from 'pg';
import type { EnqueueOptions } from 'nest-dedup-queue';
import { FixtureProcess, killFixtures, spawnFixture } from './fixtures/child-harness';
import type { RoundReport } from './fixtures/child-policy-enqueuer';
import { PolicyTasks, policyTablesSql } from './fixtures/child-policy-tasks';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

const ENQUEUERS = ['a', 'b', 'c'];
const ROUNDS = 6;
const CALLS = 40;
const KEYS = ['f0', 'f1', 'f2', 'f3'];
const POLICIES: EnqueueOptions[] = [
  { onDuplicate: 'reject' },
  { onDuplicate: 'return-existing' },
  { onDuplicate: 'replace' },
  { onDuplicate: 'replace', whenRunning: 'return-existing' },
  { onDuplicate: 'replace', whenRunning: 'queue-next' },
  { onDuplicate: 'supersede' },
  { onDuplicate: 'replace', delayMs: 20, maxDelayMs: 60 },
  { onDuplicate: 'return-existing', requireSameArgs: true },
  { onDuplicate: 'send' },
];
const EXPECTED_ERRORS = new Set(['QueueDeduplicatedError', 'DeduplicationMismatchError']);

/** A small seeded generator (mulberry32), so that a failing run can be replayed. */
function generator(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const schema = uniqueSchema('policy_fuzz');
const view = `"${schema}".workflows`;
let pool: Pool;
let parent: QueueApp;
let enqueuers: FixtureProcess[] = [];
let worker: FixtureProcess;
/** Stops the invariant monitor (also when the test failed before it could). */
let stopMonitor: (() => Promise<unknown>) | undefined;

beforeAll(async () => {
  pool = testPool();
  parent = await startQueueApp(
    { schema, worker: false, connection: { url: databaseUrl(), poolSize: 2 }, queues: [{ name: 'live' }] },
    [PolicyTasks],
  );
  await pool.query(policyTablesSql(schema));
  enqueuers = ENQUEUERS.map((name) =>
    spawnFixture('child-policy-enqueuer.ts', `enqueuer-${name}`, { SCHEMA: schema, CHILD_NAME: name, QUEUES: 'live' }),
  );
  worker = spawnFixture('child-policy-worker.ts', 'worker', { SCHEMA: schema, QUEUES: 'live' });
  await Promise.all([...enqueuers, worker].map((child) => child.message('ready')));
});

afterAll(async () => {
  await stopMonitor?.();
  await pool.query(
    `INSERT INTO "${schema}".policy_release (label) SELECT label FROM "${schema}".policy_events ON CONFLICT DO NOTHING`,
  );
  for (const child of [...enqueuers, worker]) if (!child.hasEnded) child.send({ type: 'stop' });
  await Promise.all([...enqueuers, worker].map((child) => child.waitForExit(10_000).catch(() => undefined)));
  await killFixtures();
  await parent?.close();
  await dropSchema(pool, schema);
  await pool.end();
});

interface Violations {
  doubleHeld: number;
  doubleNext: number;
  orphans: number;
  /** A `queue-next` follow-up waiting while no unfinished workflow holds its key. */
  stranded: number;
}

/** Samples the invariants over the keys every few milliseconds until stopped. */
async function monitor(): Promise<() => Promise<{ samples: number; violations: Violations }>> {
  const client = new Client({ connectionString: databaseUrl() });
  client.on('error', () => undefined);
  await client.connect();
  let running = true;
  let samples = 0;
  const violations: Violations = { doubleHeld: 0, doubleNext: 0, orphans: 0, stranded: 0 };
  const loop = (async () => {
    while (running) {
      const { rows } = await client.query(
        `SELECT
           (SELECT count(*)::int FROM (SELECT 1 FROM "${schema}".workflow_queue
              WHERE queue_name = 'live' AND status IN ('ENQUEUED', 'PENDING', 'WAITING')
                AND active_deduplication_id IS NOT NULL
              GROUP BY active_deduplication_id HAVING count(*) > 1) AS d) AS "doubleHeld",
           (SELECT count(*)::int FROM (SELECT 1 FROM "${schema}".workflow_queue
              WHERE queue_name = 'live' AND next_deduplication_id IS NOT NULL
              GROUP BY next_deduplication_id HAVING count(*) > 1) AS n) AS "doubleNext",
           (SELECT count(*)::int FROM "${schema}".workflow_queue
              WHERE queue_name = 'live' AND deduplication_id = ANY($1) AND status IN ('ENQUEUED', 'PENDING', 'WAITING')
                AND active_deduplication_id IS NULL AND next_deduplication_id IS NULL) AS orphans,
           (SELECT count(*)::int FROM "${schema}".workflow_queue AS f
              WHERE f.queue_name = 'live' AND f.status = 'ENQUEUED' AND f.next_deduplication_id IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM "${schema}".workflow_queue AS h
                                WHERE h.queue_name = 'live' AND h.active_deduplication_id = f.next_deduplication_id
                                  AND h.status IN ('ENQUEUED', 'PENDING', 'WAITING'))) AS stranded`,
        [KEYS],
      );
      samples += 1;
      for (const field of Object.keys(violations) as Array<keyof Violations>) violations[field] += rows[0][field];
      await new Promise((resolve) => setTimeout(resolve, 3));
    }
  })();
  const stop = async () => {
    running = false;
    await loop;
    await client.end();
    return { samples, violations };
  };
  stopMonitor = stop;
  return stop;
}

it(`${ENQUEUERS.length} enqueuing processes and a worker, ${ROUNDS} rounds of ${CALLS} calls each over ${KEYS.length} keys: 0 invariant violations`, async () => {
  const random = generator(20261202);
  const stop = await monitor();
  const outcomes = new Map<string, number>();
  let calls = 0;
  let unexpected: string[] = [];
  const named: Array<{ key: string; workflowId: string }> = [];
  for (let round = 1; round <= ROUNDS; round++) {
    const messages = ENQUEUERS.map(() => {
      const keys = Array.from({ length: CALLS }, () => KEYS[Math.floor(random() * KEYS.length)]);
      const optionsPerCall = keys.map(() => POLICIES[Math.floor(random() * POLICIES.length)]);
      return { keys, optionsPerCall };
    });
    // Half of the round's workflows finish as soon as they start; the others run until the round is over.
    const early = ENQUEUERS.flatMap((name) =>
      Array.from({ length: CALLS }, (_, n) => `${name}-r${round}-${n}`).filter(() => random() < 0.5),
    );
    await pool.query(`INSERT INTO "${schema}".policy_release (label) SELECT unnest($1::text[])`, [early]);
    enqueuers.forEach((child, index) =>
      child.send({ type: 'go', round, queue: 'live', options: {}, spacingMs: 3, ...messages[index] }),
    );
    const replies = await Promise.all(enqueuers.map((child) => child.message<RoundReport>('results', { round })));
    for (const [index, reply] of replies.entries()) {
      for (const [n, result] of reply.results.entries()) {
        calls += 1;
        const policy = messages[index].optionsPerCall[n];
        const name = `${policy.onDuplicate}${policy.whenRunning ? `+${policy.whenRunning}` : ''}${
          policy.maxDelayMs ? '+maxDelayMs' : ''
        }${policy.requireSameArgs ? '+requireSameArgs' : ''}`;
        const kind = result.error ? result.error.name : result.created ? 'created' : 'existing';
        outcomes.set(`${name}: ${kind}`, (outcomes.get(`${name}: ${kind}`) ?? 0) + 1);
        if (result.error && !EXPECTED_ERRORS.has(result.error.name)) {
          unexpected.push(`${result.label}: ${result.error.name}: ${result.error.message}`);
        }
        const workflowId = result.workflowId ?? result.error?.existingWorkflowId;
        if (workflowId) named.push({ key: result.deduplicationId, workflowId });
      }
    }
    await pool.query(
      `INSERT INTO "${schema}".policy_release (label) SELECT label FROM "${schema}".policy_events ON CONFLICT DO NOTHING`,
    );
  }
  unexpected = unexpected.slice(0, 5);

  // Everything left runs to its end: nothing waits forever (a follow-up whose holder is gone, say), and every
  // duplicate sent to a holder that never receives starts a workflow of its own in the end.
  await waitFor(
    async () => {
      await pool.query(
        `INSERT INTO "${schema}".policy_release (label)
         SELECT (inputs ->> 0) FROM "${schema}".workflow_queue WHERE queue_name = 'live'
         ON CONFLICT DO NOTHING`,
      );
      const { rows } = await pool.query(
        `SELECT workflow_id, status, deduplication_id, inputs ->> 0 AS label, executor_id,
                round(extract(epoch FROM clock_timestamp() - created_at))::int AS age_s
         FROM ${view}
         WHERE queue_name = 'live' AND deduplication_id = ANY($1) AND status IN ('ENQUEUED', 'PENDING', 'WAITING')`,
        [KEYS],
      );
      if (rows.length > 0) throw new Error(`still unfinished: ${JSON.stringify(rows.slice(0, 8))}`);
      const unreceived = await pool.query(
        `SELECT count(*)::int AS n FROM "${schema}".workflow_messages WHERE queue_name = 'live' AND received_at IS NULL`,
      );
      if (unreceived.rows[0].n > 0) throw new Error(`${unreceived.rows[0].n} duplicate(s) sent and not yet delivered`);
      return true;
    },
    { what: 'every workflow of the keys to finish', timeoutMs: 30_000, intervalMs: 100 },
  );
  const { samples, violations } = await stop();
  stopMonitor = undefined;
  const { rows } = await pool.query(
    `SELECT workflow_id, deduplication_id, status FROM ${view} WHERE queue_name = 'live' AND deduplication_id = ANY($1)`,
    [KEYS],
  );
  const keyOf = new Map(rows.map((row) => [row.workflow_id as string, row.deduplication_id as string]));
  const misnamed = named.filter(({ key, workflowId }) => keyOf.get(workflowId) !== key);
  const statuses = rows.reduce<Record<string, number>>(
    (counts, row) => ({ ...counts, [row.status]: (counts[row.status] ?? 0) + 1 }),
    {},
  );

  process.stdout.write(
    `[policy-fuzz] ${calls} calls, ${rows.length} workflows (${JSON.stringify(statuses)}), ${samples} samples, ` +
      `violations ${JSON.stringify(violations)}\n` +
      [...outcomes.entries()]
        .sort()
        .map(([outcome, count]) => `  ${outcome}: ${count}`)
        .join('\n') +
      '\n',
  );
  expect(calls).toBe(ENQUEUERS.length * ROUNDS * CALLS);
  expect(unexpected).toEqual([]);
  expect(violations).toEqual({ doubleHeld: 0, doubleNext: 0, orphans: 0, stranded: 0 });
  expect(samples).toBeGreaterThan(10);
  expect(misnamed.slice(0, 5)).toEqual([]);
  expect(statuses.CANCELLED).toBeGreaterThan(0);
});
