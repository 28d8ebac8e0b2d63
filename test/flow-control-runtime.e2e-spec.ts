/**
 * Run-time control across OS processes: limits changed (`setQueueLimits`) and queues paused/resumed from one
 * process (the test's own, which runs no workflows) take effect in two other worker processes; how long that takes
 * is measured and printed, not asserted. And listening to a subset of queues (`worker: { queues }`).
 *
 * "Took effect" is read from the claims themselves: a trigger records every status change with the database's
 * clock (child-flow-support.ts), so each claim is known with the number of the queue's workflows running at it.
 */
import type { Pool } from 'pg';
import type { QueueOptions } from 'nest-dedup-queue';
import { FixtureProcess, killFixtures } from './fixtures/child-harness';
import type { FlowTasks } from './fixtures/child-flow-tasks';
import {
  callChild,
  countByStatus,
  dbNow,
  maxOverlap,
  overlapAtStarts,
  outputMark,
  pendingIntervals,
  printed,
  release,
  startFlowProducer,
  startFlowWorkers,
} from './fixtures/child-flow-support';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import type { QueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

const POLL_MS = 100;
const QUEUES: QueueOptions[] = [
  { name: 'ctl', concurrency: 3, workerConcurrency: 3 },
  { name: 'paused-limited', concurrency: 4, workerConcurrency: 4 },
  { name: 'paused-open', workerConcurrency: 3 },
  { name: 'canary' },
  { name: 'parts', partitionConcurrency: 3, workerConcurrency: 6 },
  { name: 'rated-keys', rateLimit: { limit: 5, periodMs: 60_000, perPartition: true }, workerConcurrency: 6 },
  { name: 'plain', workerConcurrency: 2 },
  { name: 'a' },
  { name: 'b' },
  // Drained only by the 'spinner' process of the pause-race tests.
  { name: 'spin', workerConcurrency: 2 },
  { name: 'paused-limited-2', concurrency: 2 },
  { name: 'paused-open-2', workerConcurrency: 2 },
];
const NOT_FOR_MAIN_WORKERS = ['a', 'b', 'spin', 'paused-limited-2', 'paused-open-2'];
const WORKERS = ['c1', 'c2'];

describe('run-time control across worker processes', () => {
  const schema = uniqueSchema('flow_runtime');
  let pool: Pool;
  let app: QueueApp;
  let tasks: FlowTasks;
  let workers: FixtureProcess[];

  beforeAll(async () => {
    pool = testPool();
    ({ app, tasks } = await startFlowProducer(pool, schema, QUEUES));
    const drained = QUEUES.map((queue) => queue.name).filter((name) => !NOT_FOR_MAIN_WORKERS.includes(name));
    workers = await startFlowWorkers(schema, WORKERS, QUEUES, {
      WORKER: JSON.stringify({ queues: drained }),
      POLL_MS: String(POLL_MS),
    });
  });

  afterAll(async () => {
    if (pool) await release(pool, schema, '*').catch(() => undefined);
    await killFixtures();
    await app?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  const enqueueRecords = (queue: string, count: number, sleepMs: number, prefix: string) =>
    Promise.all(
      Array.from({ length: count }, (_, n) => app.queues.enqueue(queue, tasks.record, [`${prefix}${n}`, sleepMs])),
    );

  const succeeded = async (queue: string) => (await countByStatus(pool, schema, queue)).SUCCESS ?? 0;

  /** Waits out several polling ticks of every worker: a canary delayed by 5 ticks has run. */
  async function afterSeveralPollTicks(): Promise<void> {
    const canary = await app.queues.enqueue('canary', tasks.noop, ['canary'], { delayMs: 5 * POLL_MS });
    await canary.getResult({ timeoutMs: 10_000 });
  }

  const ms = (us: number) => Math.round(us / 100) / 10;

  it('setQueueLimits({ concurrency: 1 }) from another process takes effect in both workers; null restores the declared 3', async () => {
    // The whole backlog is queued before the workers start on it (a pause is exact for a queue with a global limit).
    await app.queues.pauseQueue('ctl');
    await enqueueRecords('ctl', 150, 30, 'ctl-');
    await app.queues.resumeQueue('ctl');
    await waitFor(async () => (await succeeded('ctl')) >= 15, { what: '15 ctl workflows done' });
    const before = await pendingIntervals(pool, schema, 'ctl');
    expect(maxOverlap(before)).toBe(3);

    const changeCalled = await dbNow(pool);
    await app.queues.setQueueLimits('ctl', { concurrency: 1 });
    const changeResolved = await dbNow(pool);
    // Effective once every later claim happens with nothing else running: wait for 8 such claims in a row.
    const claims = await waitFor(
      async () => {
        const after = overlapAtStarts(await pendingIntervals(pool, schema, 'ctl')).filter(
          (i) => i.start > changeCalled,
        );
        return after.length >= 8 && after.slice(-8).every((i) => i.runningAtStart === 1) && after;
      },
      { timeoutMs: 20_000, intervalMs: 50, what: 'claims to respect concurrency 1' },
    );
    const aboveLimit = claims.filter((i) => i.runningAtStart > 1);
    const effectMs = aboveLimit.length ? ms(Math.max(...aboveLimit.map((i) => i.start)) - changeCalled) : 0;
    console.log(
      `[flow-control] setQueueLimits concurrency 3 -> 1 (the call took ${ms(changeResolved - changeCalled)} ms) took effect within ${effectMs} ms in both workers ` +
        `(${aboveLimit.length} claim(s) above the new limit after the call, then ${claims.length - aboveLimit.length} within it)`,
    );
    for (const worker of workers) {
      await expect(callChild(worker, 'getQueueSettings', 'ctl')).resolves.toMatchObject({
        concurrency: 1,
        workerConcurrency: 3,
        paused: false,
      });
    }

    const restoreCalled = await dbNow(pool);
    await app.queues.setQueueLimits('ctl', { concurrency: null });
    const restored = await waitFor(
      async () =>
        overlapAtStarts(await pendingIntervals(pool, schema, 'ctl')).find(
          (i) => i.start > restoreCalled && i.runningAtStart === 3,
        ),
      { timeoutMs: 20_000, intervalMs: 50, what: '3 ctl workflows running again' },
    );
    console.log(
      `[flow-control] setQueueLimits concurrency null (back to 3) took effect within ${ms(restored.start - restoreCalled)} ms`,
    );
    await expect(app.queues.getQueueSettings('ctl')).resolves.toMatchObject({
      concurrency: 3,
      workerConcurrency: 3,
      paused: false,
    });
    await waitFor(async () => (await succeeded('ctl')) === 150, {
      timeoutMs: 30_000,
      intervalMs: 100,
      what: 'ctl to drain',
    });
    expect(maxOverlap(await pendingIntervals(pool, schema, 'ctl'))).toBe(3);
  });

  async function pauseAndResume(queue: string) {
    await enqueueRecords(queue, 80, 40, `${queue}-`);
    await waitFor(async () => (await succeeded(queue)) >= 8, { what: `8 ${queue} workflows done` });

    const pauseCalled = await dbNow(pool);
    await app.queues.pauseQueue(queue);
    const pauseResolved = await dbNow(pool);
    // Nothing runs any more once the running ones finished.
    await waitFor(async () => (await countByStatus(pool, schema, queue)).PENDING === undefined, {
      timeoutMs: 20_000,
      what: `${queue} to stop running`,
    });
    const claimsAtPause = await pendingIntervals(pool, schema, queue);
    const lastClaim = Math.max(...claimsAtPause.map((i) => i.start));
    const waiting = (await countByStatus(pool, schema, queue)).ENQUEUED;
    expect(waiting).toBeGreaterThan(0);

    // While paused, enqueues succeed and wait; both workers are alive and keep polling meanwhile.
    await enqueueRecords(queue, 5, 40, `${queue}-late-`);
    await afterSeveralPollTicks();
    for (const worker of workers)
      await expect(callChild(worker, 'getQueueSettings', queue)).resolves.toMatchObject({ paused: true });
    await afterSeveralPollTicks();
    expect(await countByStatus(pool, schema, queue)).toEqual({ SUCCESS: 80 - waiting, ENQUEUED: waiting + 5 });
    expect((await pendingIntervals(pool, schema, queue)).length).toBe(claimsAtPause.length);

    const resumeCalled = await dbNow(pool);
    await app.queues.resumeQueue(queue);
    await waitFor(async () => (await succeeded(queue)) === 85, {
      timeoutMs: 30_000,
      intervalMs: 100,
      what: `${queue} to drain after resume`,
    });
    const afterResume = (await pendingIntervals(pool, schema, queue)).filter((i) => i.start > resumeCalled);
    expect(afterResume).toHaveLength(waiting + 5);
    expect([...new Set(afterResume.map((i) => i.executorId))].sort()).toEqual(WORKERS);
    return {
      pauseCallMs: ms(pauseResolved - pauseCalled),
      lastClaimAfterPauseResolvedMs: ms(lastClaim - pauseResolved),
      pauseMs: Math.max(0, ms(lastClaim - pauseCalled)),
      resumeMs: ms(Math.min(...afterResume.map((i) => i.start)) - resumeCalled),
      claimsAfterPauseResolved: claimsAtPause.filter((i) => i.start > pauseResolved).length,
    };
  }

  it('pauseQueue stops both workers from starting work of a queue with a global limit; resumeQueue restarts them', async () => {
    const measured = await pauseAndResume('paused-limited');
    console.log('[flow-control] pause/resume (queue with concurrency), ms:', JSON.stringify(measured));
    // The claim checks the pause flag under the queue-row lock: no claim commits after pauseQueue resolved.
    expect(measured.claimsAfterPauseResolved).toBe(0);
  });

  it('pauseQueue stops both workers from starting work of a queue without global limits; resumeQueue restarts them', async () => {
    const measured = await pauseAndResume('paused-open');
    console.log('[flow-control] pause/resume (queue without global limits), ms:', JSON.stringify(measured));
  });

  describe('with a worker whose event loop is busy (CPU-bound work) when the pause and then an enqueue arrive', () => {
    let spinner: FixtureProcess;

    beforeAll(async () => {
      [spinner] = await startFlowWorkers(schema, ['spinner'], QUEUES, {
        WORKER: JSON.stringify({ queues: ['spin', 'paused-limited-2', 'paused-open-2'] }),
        POLL_MS: String(POLL_MS),
      });
    });

    afterAll(async () => {
      if (spinner && !spinner.hasEnded) {
        spinner.send({ type: 'stop' });
        await spinner.waitForExit();
      }
    });

    it.each(['paused-limited-2', 'paused-open-2'])(
      'never starts work of %s enqueued after pauseQueue resolved',
      async (queue) => {
        const spin = await app.queues.enqueue('spin', tasks.spin, [`spin-${queue}`, 500]);
        await waitFor(
          async () =>
            (await pool.query(`SELECT 1 FROM "${schema}".runs WHERE key = $1`, [`spin-${queue}`])).rowCount === 1,
          {
            what: 'the spinner to be busy',
          },
        );
        await app.queues.pauseQueue(queue);
        const handles = await enqueueRecords(queue, 3, 0, `${queue}-`);
        await spin.getResult({ timeoutMs: 10_000 });
        // The spinner is responsive again and has polled several times: a canary only it drains, delayed 5 ticks, ran.
        await (
          await app.queues.enqueue('spin', tasks.noop, ['canary'], { delayMs: 5 * POLL_MS })
        ).getResult({ timeoutMs: 10_000 });
        await expect(callChild(spinner, 'getQueueSettings', queue)).resolves.toMatchObject({ paused: true });

        const statuses = await Promise.all(handles.map(async (handle) => (await handle.getStatus()).status));
        try {
          expect(statuses).toEqual(['ENQUEUED', 'ENQUEUED', 'ENQUEUED']);
        } finally {
          await app.queues.resumeQueue(queue);
        }
        await Promise.all(handles.map((handle) => handle.getResult({ timeoutMs: 10_000 })));
      },
    );
  });

  it("lowering partitionConcurrency below a partition's running count does not stop the other partitions", async () => {
    const marks = workers.map(outputMark);
    await Promise.all(
      [0, 1, 2].map((n) => app.queues.enqueue('parts', tasks.hold, [`busy-${n}`], { partitionKey: 'busy' })),
    );
    await waitFor(async () => (await countByStatus(pool, schema, 'parts')).PENDING === 3, { what: '3 busy running' });
    // 'busy' also has work waiting behind its 3 running ones.
    await app.queues.enqueue('parts', tasks.record, ['busy-waiting', 0], { partitionKey: 'busy' });
    await app.queues.setQueueLimits('parts', { partitionConcurrency: 1 });
    // Both workers have applied the change (getQueueSettings re-reads the settings the worker uses).
    for (const worker of workers)
      await expect(callChild(worker, 'getQueueSettings', 'parts')).resolves.toMatchObject({ partitionConcurrency: 1 });

    const free = await app.queues.enqueue('parts', tasks.record, ['free-0', 0], { partitionKey: 'free' });
    try {
      const result = await free.getResult({ timeoutMs: 3_000 }).catch((error: Error) => error.message);
      expect({
        result,
        claimErrors: workers.flatMap((worker, n) => printed(worker, 'Claiming from queue "parts" failed', marks[n])),
      }).toEqual({
        result: 'free-0',
        claimErrors: [],
      });
    } finally {
      await release(pool, schema, 'busy-0', 'busy-1', 'busy-2');
      await app.queues.setQueueLimits('parts', { partitionConcurrency: null });
    }
  });

  it("lowering a per-partition rate limit below a partition's recent starts does not stop the other partitions", async () => {
    const marks = workers.map(outputMark);
    const hot = await Promise.all(
      [0, 1, 2, 3, 4].map((n) =>
        app.queues.enqueue('rated-keys', tasks.record, [`hot-${n}`, 0], { partitionKey: 'hot' }),
      ),
    );
    await Promise.all(hot.map((handle) => handle.getResult({ timeoutMs: 10_000 })));
    // 'hot' has used its 5 starts of the minute and has work waiting.
    await app.queues.enqueue('rated-keys', tasks.record, ['hot-waiting', 0], { partitionKey: 'hot' });
    await app.queues.setQueueLimits('rated-keys', { rateLimit: { limit: 2, periodMs: 60_000 } });
    for (const worker of workers) {
      await expect(callChild(worker, 'getQueueSettings', 'rated-keys')).resolves.toMatchObject({
        rateLimit: { limit: 2, periodMs: 60_000, perPartition: true },
      });
    }

    const cold = await app.queues.enqueue('rated-keys', tasks.record, ['cold-0', 0], { partitionKey: 'cold' });
    try {
      const result = await cold.getResult({ timeoutMs: 3_000 }).catch((error: Error) => error.message);
      expect({
        result,
        claimErrors: workers.flatMap((worker, n) =>
          printed(worker, 'Claiming from queue "rated-keys" failed', marks[n]),
        ),
      }).toEqual({
        result: 'cold-0',
        claimErrors: [],
      });
    } finally {
      await app.queues.setQueueLimits('rated-keys', { rateLimit: null });
    }
  });

  it('setQueueLimits keeps rateLimit.perPartition', async () => {
    const rateLimit = { limit: 5, periodMs: 1000, perPartition: true };
    await app.queues.setQueueLimits('plain', { rateLimit });
    try {
      expect((await app.queues.getQueueSettings('plain')).rateLimit).toEqual(rateLimit);
      expect((await callChild<{ rateLimit: unknown }>(workers[0], 'getQueueSettings', 'plain')).rateLimit).toEqual(
        rateLimit,
      );
    } finally {
      await app.queues.setQueueLimits('plain', { rateLimit: null });
    }
  });

  it('a queue made partitioned at run time accepts partition keys in the process that changed it (worker: false)', async () => {
    await app.queues.setQueueLimits('plain', { partitionConcurrency: 1 });
    try {
      // Workers re-read the settings on every polling tick; this process runs no workflows.
      await waitFor(
        async () => (await app.queues.enqueue('plain', tasks.record, ['keyed', 0], { partitionKey: 'k' })).workflowId,
        { timeoutMs: 3_000, what: 'enqueue with a partitionKey to be accepted' },
      );
    } finally {
      await app.queues.setQueueLimits('plain', { partitionConcurrency: null });
    }
  });

  it('a process with worker: { queues: ["a"] } runs a-work and never claims b-work it enqueues', async () => {
    const small = { POOL_SIZE: '3', TASK_POOL_SIZE: '2', POLL_MS: String(POLL_MS) };
    const [subset] = await startFlowWorkers(schema, ['only-a'], QUEUES, {
      WORKER: JSON.stringify({ queues: ['a'] }),
      ...small,
    });
    const aIds: string[] = [];
    const bIds: string[] = [];
    for (let n = 0; n < 5; n++) {
      aIds.push(await callChild<string>(subset, 'enqueue', 'a', 'record', [`a-${n}`, 0]));
      bIds.push(await callChild<string>(subset, 'enqueue', 'b', 'record', [`b-${n}`, 0]));
    }
    await waitFor(async () => (await succeeded('a')) === 5, { what: 'a to drain' });
    // Several of its polling ticks later (an a-canary delayed by 5 ticks has run), b-work is still waiting, unclaimed.
    const canary = await callChild<string>(subset, 'enqueue', 'a', 'noop', ['a-canary'], { delayMs: 5 * POLL_MS });
    await waitFor(
      async () => (await app.queues.retrieve(canary).then((handle) => handle.getStatus())).status === 'SUCCESS',
      {
        what: 'the a-canary to run',
      },
    );
    expect(await countByStatus(pool, schema, 'b')).toEqual({ ENQUEUED: 5 });
    const rows = async (queue: string) =>
      (
        await pool.query(
          `SELECT workflow_id, executor_id, attempts FROM "${schema}".workflows WHERE queue_name = $1 ORDER BY seq`,
          [queue],
        )
      ).rows;
    expect(await rows('b')).toEqual(bIds.map((id) => ({ workflow_id: id, executor_id: null, attempts: 0 })));
    expect((await rows('a')).map((row) => row.executor_id)).toEqual(Array(6).fill('only-a'));

    // A process that drains b runs them; the a-only process still never touches them.
    const [onlyB] = await startFlowWorkers(schema, ['only-b'], QUEUES, {
      WORKER: JSON.stringify({ queues: ['b'] }),
      ...small,
    });
    await waitFor(async () => (await succeeded('b')) === 5, { what: 'b to drain' });
    expect((await rows('b')).map((row) => row.executor_id)).toEqual(Array(5).fill('only-b'));
    expect(
      await pool.query(`SELECT DISTINCT executor_id FROM "${schema}".runs WHERE queue_name = 'b'`).then((r) => r.rows),
    ).toEqual([{ executor_id: 'only-b' }]);
    for (const child of [subset, onlyB]) child.send({ type: 'stop' });
    await Promise.all([subset, onlyB].map((child) => child.waitForExit()));
  });
});
