/**
 * A 4-process fuzz of the duplicate policies and of the workflows that compose: three enqueuing processes
 * (child-policy-enqueuer.ts) fire streams of calls over a few keys, each call with a policy drawn from a seeded
 * generator (every policy, `supersede`, `send`, a capped debounce and `requireSameArgs` included), while a worker
 * process (child-policy-worker.ts) runs them. A separate connection samples the invariants all along: never two
 * unfinished holders of one key, never two follow-ups, never an unfinished workflow that holds neither the key nor its
 * follow-up slot, never a follow-up waiting while no workflow holds its key.
 *
 * The first test's holders (`PolicyTasks.hold`) finish at once or when the round is over; at the end every workflow
 * of the keys finishes and every call either named a workflow of its key or failed with a deduplication error. The
 * second test's calls enqueue composers (fuzz-compose-tasks.ts) whose seeded plans enqueue keyed children with every
 * policy, send them messages, set and read events, sleep and wait in `recv`, some with a deadline their children
 * inherit; meanwhile the test cancels some composers with `cancelChildren` (no unfinished descendant is left after
 * the call) and SIGKILLs the worker, whose workflows a new worker recovers. At the end every send is one message,
 * every received message is one recorded `recv`, and everything finished. The figures are printed.
 */
import { Client, Pool } from 'pg';
import type { EnqueueOptions } from 'nest-dedup-queue';
import { FixtureProcess, killFixtures, spawnFixture } from './fixtures/child-harness';
import type { RoundReport } from './fixtures/child-policy-enqueuer';
import { PolicyTasks, policyTablesSql } from './fixtures/child-policy-tasks';
import { FuzzComposeTasks, PlanStep } from './fixtures/fuzz-compose-tasks';
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

const QUEUES = 'live,compose,members';

const schema = uniqueSchema('policy_fuzz');
const view = `"${schema}".workflows`;
let pool: Pool;
let parent: QueueApp;
let enqueuers: FixtureProcess[] = [];
let worker: FixtureProcess;
/** Stops the invariant monitor (also when the test failed before it could). */
let stopMonitor: (() => Promise<unknown>) | undefined;

/** A worker process draining every queue of the file, with a short lease (its SIGKILLed predecessor's runs recover fast). */
function startWorker(executorId: string): FixtureProcess {
  return spawnFixture('child-policy-worker.ts', executorId, {
    SCHEMA: schema,
    QUEUES,
    EXECUTOR_ID: `${schema}-${executorId}`,
    LEASE_MS: '1500',
  });
}

beforeAll(async () => {
  pool = testPool();
  parent = await startQueueApp(
    {
      schema,
      worker: false,
      connection: { url: databaseUrl(), poolSize: 2 },
      queues: QUEUES.split(',').map((name) => ({ name })),
    },
    [PolicyTasks, FuzzComposeTasks],
  );
  await pool.query(policyTablesSql(schema));
  enqueuers = ENQUEUERS.map((name) =>
    spawnFixture('child-policy-enqueuer.ts', `enqueuer-${name}`, { SCHEMA: schema, CHILD_NAME: name, QUEUES }),
  );
  worker = startWorker('worker-1');
  await Promise.all([...enqueuers, worker].map((child) => child.message('ready')));
});

afterAll(async () => {
  await stopMonitor?.();
  await pool.query(
    `INSERT INTO "${schema}".policy_release (label) SELECT label FROM "${schema}".policy_events ON CONFLICT DO NOTHING`,
  );
  for (const child of [...enqueuers, worker]) if (!child.hasEnded) child.send({ type: 'stop' });
  await Promise.all([...enqueuers, worker].map((child) => child.waitForExit(15_000).catch(() => undefined)));
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

/** Samples the invariants over the keyed workflows of `queues` every few milliseconds until stopped. */
async function monitor(queues: string[]): Promise<() => Promise<{ samples: number; violations: Violations }>> {
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
              WHERE queue_name = ANY($1) AND status IN ('ENQUEUED', 'PENDING', 'WAITING')
                AND active_deduplication_id IS NOT NULL
              GROUP BY queue_name, active_deduplication_id HAVING count(*) > 1) AS d) AS "doubleHeld",
           (SELECT count(*)::int FROM (SELECT 1 FROM "${schema}".workflow_queue
              WHERE queue_name = ANY($1) AND next_deduplication_id IS NOT NULL
              GROUP BY queue_name, next_deduplication_id HAVING count(*) > 1) AS n) AS "doubleNext",
           (SELECT count(*)::int FROM "${schema}".workflow_queue
              WHERE queue_name = ANY($1) AND deduplication_id IS NOT NULL AND status IN ('ENQUEUED', 'PENDING', 'WAITING')
                AND active_deduplication_id IS NULL AND next_deduplication_id IS NULL) AS orphans,
           (SELECT count(*)::int FROM "${schema}".workflow_queue AS f
              WHERE f.queue_name = ANY($1) AND f.status = 'ENQUEUED' AND f.next_deduplication_id IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM "${schema}".workflow_queue AS h
                                WHERE h.queue_name = f.queue_name AND h.active_deduplication_id = f.next_deduplication_id
                                  AND h.status IN ('ENQUEUED', 'PENDING', 'WAITING'))) AS stranded`,
        [queues],
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
  const stop = await monitor(['live']);
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

const COMPOSE_ROUNDS = 4;
const COMPOSERS = 8;
const COMPOSER_KEYS = ['c0', 'c1', 'c2'];
const MEMBER_KEYS = ['m0', 'm1', 'm2', 'm3', 'm4', 'm5', 'm6', 'm7'];
const CHILD_POLICIES: Array<Pick<EnqueueOptions, 'onDuplicate' | 'whenRunning'>> = [
  { onDuplicate: 'reject' },
  { onDuplicate: 'return-existing' },
  { onDuplicate: 'supersede' },
  { onDuplicate: 'replace', whenRunning: 'queue-next' },
  { onDuplicate: 'replace', whenRunning: 'return-existing' },
];
const COMPOSER_POLICIES: Array<EnqueueOptions['onDuplicate']> = ['reject', 'return-existing', 'supersede'];
const UNFINISHED = `('ENQUEUED', 'PENDING', 'WAITING', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')`;

/** A composer's plan: 3 to 7 steps, each something recorded in its body. */
function planOf(random: () => number): PlanStep[] {
  const pick = <T>(items: T[]) => items[Math.floor(random() * items.length)];
  return Array.from({ length: 3 + Math.floor(random() * 5) }, (): PlanStep => {
    const draw = random();
    if (draw < 0.3) {
      const key = random() < 0.35 ? null : pick(MEMBER_KEYS);
      return { op: 'child', key, ...pick(CHILD_POLICIES), spawn: random() < 0.3 } as PlanStep;
    }
    if (draw < 0.55) return { op: 'send' };
    if (draw < 0.62) return { op: 'event' };
    if (draw < 0.75) return { op: 'read', timeoutMs: pick([0, 300, 2500]) };
    if (draw < 0.85) return { op: 'nap', ms: pick([200, 1200]) };
    return { op: 'wait', timeoutMs: pick([300, 2000]) };
  });
}

/** The unfinished descendants of `workflowId`, to any depth, through finished ones. */
async function unfinishedDescendants(workflowId: string): Promise<string[]> {
  const { rows } = await pool.query<{ workflow_id: string }>(
    `WITH RECURSIVE tree AS (
       SELECT workflow_id, status FROM ${view} WHERE parent_workflow_id = $1
       UNION
       SELECT w.workflow_id, w.status FROM ${view} AS w JOIN tree AS t ON w.parent_workflow_id = t.workflow_id
     )
     SELECT workflow_id FROM tree WHERE status IN ${UNFINISHED}`,
    [workflowId],
  );
  return rows.map((row) => row.workflow_id);
}

it(`composing workflows: ${ENQUEUERS.length} enqueuing processes, a worker SIGKILLed and replaced, cancels of whole trees: 0 violations`, async () => {
  const random = generator(20261204);
  const stop = await monitor(['compose', 'members']);
  let calls = 0;
  let cancels = 0;
  const orphans: string[] = [];
  const unexpected: string[] = [];
  const composers: string[] = [];
  // NOTE: rounds numbered after the first test's, whose replies the enqueuers' message queues still hold.
  for (let round = 101; round <= 100 + COMPOSE_ROUNDS; round++) {
    const messages = ENQUEUERS.map(() => {
      const keys = Array.from({ length: COMPOSERS }, () =>
        random() < 0.5 ? COMPOSER_KEYS[Math.floor(random() * 3)] : null,
      );
      const optionsPerCall = keys.map((key): EnqueueOptions => ({
        ...(key ? { onDuplicate: COMPOSER_POLICIES[Math.floor(random() * COMPOSER_POLICIES.length)] } : {}),
        ...(random() < 0.2 ? { timeoutMs: 4000 } : {}),
      }));
      return { keys, optionsPerCall, plans: keys.map(() => planOf(random)) };
    });
    enqueuers.forEach((child, index) =>
      child.send({
        type: 'go',
        round,
        queue: 'compose',
        workflow: 'compose',
        options: {},
        spacingMs: 5,
        ...messages[index],
      }),
    );
    const replies = await Promise.all(enqueuers.map((child) => child.message<RoundReport>('results', { round })));
    const created: string[] = [];
    for (const result of replies.flatMap((reply) => reply.results)) {
      calls += 1;
      if (result.error && !EXPECTED_ERRORS.has(result.error.name)) {
        unexpected.push(`${result.label}: ${result.error.name}: ${result.error.message}`);
      }
      if (result.workflowId && result.created) created.push(result.workflowId);
    }
    composers.push(...created);
    if (round === 102) {
      // The worker dies mid-round; another takes over, recovering what it ran once its lease is over.
      worker.child.kill('SIGKILL');
      await worker.ended;
      worker = startWorker('worker-2');
      await worker.message('ready');
    }
    await new Promise((resolve) => setTimeout(resolve, 200 + Math.floor(random() * 600)));
    for (const workflowId of created) {
      const draw = random();
      if (draw < 0.25) {
        await parent.queues.cancel(workflowId, { cancelChildren: true });
        cancels += 1;
        orphans.push(...(await unfinishedDescendants(workflowId)).map((child) => `${workflowId} > ${child}`));
      } else if (draw < 0.5) {
        await parent.queues.send(workflowId, 'go on', { topic: 'ctl' });
      }
    }
  }

  // Everything runs to its end: plans are finite, members end once no message comes for a while.
  await waitFor(
    async () => {
      const { rows } = await pool.query(
        `SELECT workflow_id, queue_name, status FROM "${schema}".workflow_queue
         WHERE queue_name IN ('compose', 'members') AND status IN ${UNFINISHED}`,
      );
      if (rows.length > 0) throw new Error(`still unfinished: ${JSON.stringify(rows.slice(0, 6))}`);
      return true;
    },
    { what: 'every composer and member to finish', timeoutMs: 60_000, intervalMs: 200 },
  );
  const { samples, violations } = await stop();
  stopMonitor = undefined;

  const counts = async (sql: string): Promise<number> => (await pool.query(sql)).rows[0].n;
  const steps = `"${schema}".steps`;
  const messages = `"${schema}".workflow_messages`;
  const sends = await counts(
    `SELECT count(*)::int AS n FROM ${steps} WHERE queue_name = 'compose' AND step_name = 'send' AND error IS NULL`,
  );
  const sent = await counts(`SELECT count(*)::int AS n FROM ${messages} WHERE queue_name = 'members' AND topic = 'm'`);
  const receives = await counts(
    `SELECT count(*)::int AS n FROM ${steps} WHERE queue_name = 'members' AND step_name = 'recv' AND output IS NOT NULL`,
  );
  const received = await counts(
    `SELECT count(*)::int AS n FROM ${messages} WHERE queue_name = 'members' AND topic = 'm' AND received_at IS NOT NULL`,
  );
  const receivedTwice = (
    await pool.query(
      `SELECT output::text AS message FROM ${steps} WHERE queue_name = 'members' AND step_name = 'recv' AND output IS NOT NULL
       GROUP BY 1 HAVING count(*) > 1`,
    )
  ).rows;
  const operations = await counts(`SELECT count(*)::int AS n FROM ${steps} WHERE queue_name IN ('compose', 'members')`);
  const { rows: statuses } = await pool.query(
    `SELECT queue_name, status, count(*)::int AS n FROM ${view} WHERE queue_name IN ('compose', 'members')
     GROUP BY 1, 2 ORDER BY 1, 2`,
  );
  const finalOrphans: string[] = [];
  for (const workflowId of composers) finalOrphans.push(...(await unfinishedDescendants(workflowId)));

  process.stdout.write(
    `[compose-fuzz] ${calls} calls, ${composers.length} composers, ${operations} recorded operations, ` +
      `${cancels} cancels of whole trees, 1 worker SIGKILLed, ${sends} sends = ${sent} messages, ` +
      `${received} received = ${receives} recorded receives, ${samples} samples, violations ${JSON.stringify(violations)}\n` +
      statuses.map((row) => `  ${row.queue_name} ${row.status}: ${row.n}`).join('\n') +
      '\n',
  );
  expect(unexpected.slice(0, 5)).toEqual([]);
  expect(violations).toEqual({ doubleHeld: 0, doubleNext: 0, orphans: 0, stranded: 0 });
  expect(samples).toBeGreaterThan(10);
  expect(orphans).toEqual([]);
  expect(finalOrphans).toEqual([]);
  expect(sent).toBe(sends);
  expect(received).toBe(receives);
  expect(receivedTwice).toEqual([]);
  expect(sends).toBeGreaterThan(0);
  expect(received).toBeGreaterThan(0);
  expect(cancels).toBeGreaterThan(0);
}, 180_000);
