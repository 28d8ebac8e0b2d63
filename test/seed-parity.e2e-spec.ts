/**
 * The scenarios of DBOS Transact's queue tests where this library used to differ: cancelling (or timing out) a
 * stuck body frees its slot at once, duplicate policies need a key, DELAYED is reported, resume is fully specified,
 * and recorded step errors come back as their classes.
 */
import { Logger } from '@nestjs/common';
import {
  InvalidArgumentError,
  QueueDeduplicatedError,
  WorkflowFailedError,
  WorkflowStatusInfo,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';
import { ParityTasks, SeenError } from './fixtures/parity-tasks';

const QUEUES = [
  { name: 'local-one', workerConcurrency: 1 },
  { name: 'global-one', concurrency: 1, workerConcurrency: 4 },
  { name: 'plain', workerConcurrency: 10 },
  { name: 'held' },
  { name: 'recovery' },
];
const MAIN_WORKER = { queues: QUEUES.map((queue) => queue.name).filter((name) => name !== 'recovery') };

/** What a catch block sees after a replay, given what it saw the first time: the user's own class is lost. */
function afterReplay(first: SeenError[]): SeenError[] {
  return [first[0], first[1], { ...first[2], isPaymentDeclinedError: false }];
}

describe('parity with DBOS queue semantics (one process)', () => {
  const schema = uniqueSchema('parity');
  let app: QueueApp;
  let remote: QueueApp;
  let tasks: ParityTasks;
  let pool: Pool;
  let warn: jest.SpyInstance;

  const row = async (workflowId: string) =>
    (
      await pool.query(`SELECT *, not_before > now() AS delayed FROM "${schema}".workflows WHERE workflow_id = $1`, [
        workflowId,
      ])
    ).rows[0];
  const steps = async (workflowId: string) =>
    (
      await pool.query(
        `SELECT step_index, output::text AS output, error FROM "${schema}".steps WHERE workflow_id = $1`,
        [workflowId],
      )
    ).rows;
  const rowCount = async () => Number((await pool.query(`SELECT count(*) FROM "${schema}".workflows`)).rows[0].count);
  const startOf = (run: string) => tasks.starts.find((start) => start.run === run);
  const endOf = (run: string) => tasks.ends.find((end) => end.run === run);
  const warningsAbout = (workflowId: string) =>
    warn.mock.calls.filter(
      ([message]) => String(message).includes(workflowId) && String(message).includes('abandoned'),
    );
  const pending = (workflowId: string) =>
    waitFor(async () => (await row(workflowId)).status === 'PENDING', { what: `${workflowId} PENDING` });

  beforeAll(async () => {
    pool = testPool();
    warn = jest.spyOn(Logger.prototype, 'warn');
    app = await startQueueApp({ schema, queues: QUEUES, worker: MAIN_WORKER, heartbeatIntervalMs: 200 }, [ParityTasks]);
    tasks = app.get(ParityTasks);
    remote = await startQueueApp({ schema, queues: QUEUES, worker: false }, [ParityTasks]);
  });

  afterAll(async () => {
    for (const gate of tasks.starts.map((start) => start.run)) tasks.release(gate);
    await remote.close();
    await app.close();
    warn.mockRestore();
    await dropSchema(pool, schema);
    await pool.end();
  });

  describe('cancelling or timing out a body that ignores its signal frees its slot at once', () => {
    it.each(['local-one', 'global-one'])(
      'on %s: the next workflow starts while the cancelled body still runs',
      async (queue) => {
        const stuck = await app.queues.enqueue(queue, tasks.stuck, [`${queue}-A`], { deduplicationId: `${queue}-key` });
        await pending(stuck.workflowId);
        const next = await app.queues.enqueue(queue, tasks.quick, [`${queue}-B`]);
        expect((await row(next.workflowId)).status).toBe('ENQUEUED');

        const cancelledAt = Date.now();
        await expect(app.queues.cancel(stuck.workflowId)).resolves.toBe('CANCELLED');
        await expect(next.getResult({ timeoutMs: 5000 })).resolves.toBe(`${queue}-B`);

        const runs = tasks.starts.filter((start) => start.run.startsWith(queue)).map((start) => start.run);
        expect(runs).toEqual([`${queue}-A#1`, `${queue}-B#1`]);
        expect(startOf(`${queue}-B#1`)!.at).toBeGreaterThanOrEqual(cancelledAt);
        expect(startOf(`${queue}-B#1`)!.at - cancelledAt).toBeLessThan(2000);
        expect(endOf(`${queue}-A#1`)).toBeUndefined();
        expect(await row(stuck.workflowId)).toMatchObject({ status: 'CANCELLED', active_deduplication_id: null });
        expect(await row(next.workflowId)).toMatchObject({ status: 'SUCCESS' });
        expect(app.queues.abandonedRuns()).toEqual([
          {
            workflowId: stuck.workflowId,
            queueName: queue,
            workflowName: 'ParityTasks.stuck',
            reason: 'cancelled',
            abandonedAt: expect.any(Date),
            abandonedForMs: expect.any(Number),
          },
        ]);
        // The key is free while the old body runs.
        const retaken = app.queues.enqueue(queue, tasks.quick, [`${queue}-C`], { deduplicationId: `${queue}-key` });
        await expect(retaken).resolves.toMatchObject({ created: true });

        await waitFor(() => warningsAbout(stuck.workflowId).length === 1, { what: 'the abandoned-body warning' });
        tasks.release(`${queue}-A#1`);
        await waitFor(() => endOf(`${queue}-A#1`), { what: 'the abandoned body to end' });
        await waitFor(() => app.queues.abandonedRuns().length === 0, { what: 'the abandoned run to be forgotten' });
        // Its step finished after the cancel: the checkpoint is refused and the step throws the signal's reason.
        expect(endOf(`${queue}-A#1`)!.how).toBe('threw WorkflowInterruptedError');
        expect(await row(stuck.workflowId)).toMatchObject({ status: 'CANCELLED', output: null });
        expect(await steps(stuck.workflowId)).toEqual([]);
        expect(warningsAbout(stuck.workflowId)).toHaveLength(1);
      },
    );

    it('frees the slot exactly once: a concurrency-1 queue still runs one workflow at a time afterwards', async () => {
      const first = await app.queues.enqueue('local-one', tasks.stuck, ['once-A']);
      await pending(first.workflowId);
      await app.queues.cancel(first.workflowId);
      await app.queues.cancel(first.workflowId);
      const second = await app.queues.enqueue('local-one', tasks.stuck, ['once-X']);
      const third = await app.queues.enqueue('local-one', tasks.quick, ['once-Y']);
      await pending(second.workflowId);
      // Several enqueue notifications and claims go by on the worker; the third must still wait for the second.
      for (let n = 0; n < 5; n++) await (await app.queues.enqueue('plain', tasks.quick, [`barrier-${n}`])).getResult();
      expect((await row(third.workflowId)).status).toBe('ENQUEUED');
      expect(startOf('once-Y#1')).toBeUndefined();
      tasks.release('once-X#1');
      await expect(third.getResult({ timeoutMs: 5000 })).resolves.toBe('once-Y');
      expect(startOf('once-Y#1')!.at).toBeGreaterThanOrEqual(endOf('once-X#1')!.at);
      tasks.release('once-A#1');
      await waitFor(() => app.queues.abandonedRuns().length === 0, { what: 'no abandoned run' });
    });

    it('a timeout frees the slot too: CANCELLED with WorkflowTimeoutError, the next workflow starts', async () => {
      const slow = await app.queues.enqueue('global-one', tasks.stuck, ['timeout-A'], { timeoutMs: 300 });
      await pending(slow.workflowId);
      const { rows } = await pool.query(
        `SELECT deadline_at, (extract(epoch FROM deadline_at - created_at) * 1000)::float8 AS after_enqueue_ms
         FROM "${schema}".workflow_queue WHERE workflow_id = $1`,
        [slow.workflowId],
      );
      expect(rows[0].after_enqueue_ms).toBeGreaterThanOrEqual(300);
      const next = await app.queues.enqueue('global-one', tasks.quick, ['timeout-B']);
      await expect(next.getResult({ timeoutMs: 5000 })).resolves.toBe('timeout-B');
      // By the database's clock: the deadline is 300 ms after the claim, and the slot frees no earlier than it.
      expect(((await row(next.workflowId)).started_at as Date).getTime()).toBeGreaterThanOrEqual(
        (rows[0].deadline_at as Date).getTime(),
      );
      expect(endOf('timeout-A#1')).toBeUndefined();
      expect(await row(slow.workflowId)).toMatchObject({
        status: 'CANCELLED',
        error: { name: 'WorkflowTimeoutError' },
      });
      expect(app.queues.abandonedRuns()).toEqual([
        expect.objectContaining({ workflowId: slow.workflowId, reason: 'timed-out' }),
      ]);
      tasks.release('timeout-A#1');
      await waitFor(() => app.queues.abandonedRuns().length === 0, { what: 'no abandoned run' });
      expect((await row(slow.workflowId)).status).toBe('CANCELLED');
    });

    it('a cancel from another process arrives over NOTIFY and frees the slot here', async () => {
      const stuck = await app.queues.enqueue('local-one', tasks.stuck, ['remote-A']);
      await pending(stuck.workflowId);
      const next = await app.queues.enqueue('local-one', tasks.quick, ['remote-B']);
      await expect(remote.queues.cancel(stuck.workflowId)).resolves.toBe('CANCELLED');
      await expect(next.getResult({ timeoutMs: 5000 })).resolves.toBe('remote-B');
      expect(endOf('remote-A#1')).toBeUndefined();
      expect(app.queues.abandonedRuns().map((run) => run.workflowId)).toEqual([stuck.workflowId]);
      expect(remote.queues.abandonedRuns()).toEqual([]);
      tasks.release('remote-A#1');
      await waitFor(() => app.queues.abandonedRuns().length === 0, { what: 'no abandoned run' });
    });

    it('resumed while its abandoned body still runs: the old body can write neither steps nor outcome', async () => {
      const handle = await app.queues.enqueue('local-one', tasks.stuck, ['resumed'], {
        workflowId: 'resumed-while-abandoned',
      });
      await pending(handle.workflowId);
      // Resuming a PENDING workflow changes nothing.
      await app.queues.resume(handle.workflowId);
      expect(await row(handle.workflowId)).toMatchObject({ status: 'PENDING', attempts: 1 });

      await app.queues.cancel(handle.workflowId);
      await app.queues.resume(handle.workflowId);
      await waitFor(() => startOf('resumed#2'), { what: 'the second run' });
      expect(await row(handle.workflowId)).toMatchObject({ status: 'PENDING', attempts: 2 });

      tasks.release('resumed#1');
      await waitFor(() => endOf('resumed#1'), { what: 'the old body to end' });
      expect(endOf('resumed#1')!.how).toBe('threw WorkflowInterruptedError');
      expect(await steps(handle.workflowId)).toEqual([]);
      expect(await row(handle.workflowId)).toMatchObject({ status: 'PENDING', attempts: 2 });

      tasks.release('resumed#2');
      await expect(handle.getResult({ timeoutMs: 5000 })).resolves.toBe('resumed#2');
      expect(await steps(handle.workflowId)).toEqual([{ step_index: 0, output: '"resumed#2"', error: null }]);
      expect(app.queues.abandonedRuns()).toEqual([]);
    });
  });

  it('shutdown does not wait for an abandoned body', async () => {
    const options = { schema, queues: QUEUES, worker: { queues: ['recovery'] }, shutdownGraceMs: 30_000 };
    const leaving = await startQueueApp(options, [ParityTasks]);
    const { workflowId } = await leaving.queues.enqueue('recovery', leaving.get(ParityTasks).stuck, ['shutdown']);
    await pending(workflowId);
    await leaving.queues.cancel(workflowId);
    expect(leaving.queues.abandonedRuns().map((run) => run.workflowId)).toEqual([workflowId]);
    const closing = Date.now();
    await leaving.close();
    expect(Date.now() - closing).toBeLessThan(10_000);
    expect(warn.mock.calls.some(([message]) => String(message).includes('Not waiting for 1 abandoned'))).toBe(true);
    leaving.get(ParityTasks).release('shutdown#1');
  });

  it("an abandoned run's deadline does not time out the resumed run", async () => {
    const handle = await app.queues.enqueue('local-one', tasks.stuck, ['deadline'], { timeoutMs: 1500 });
    await pending(handle.workflowId);
    const firstDeadline: Date = (await row(handle.workflowId)).deadline_at;
    const dbClockPast = async (time: number) =>
      (await pool.query('SELECT now() > $1 AS past', [new Date(time)])).rows[0].past;
    // The second run starts at least 500 ms after the first, so its deadline is that much later.
    await waitFor(() => dbClockPast(firstDeadline.getTime() - 1000), { what: 'half a second of the first run' });
    await app.queues.cancel(handle.workflowId);
    await app.queues.resume(handle.workflowId);
    await waitFor(() => startOf('deadline#2'), { what: 'the second run' });
    expect((await row(handle.workflowId)).deadline_at.getTime()).toBeGreaterThan(firstDeadline.getTime() + 400);
    // Past the first run's deadline (its timer fired in this process), the second run is still running.
    await waitFor(() => dbClockPast(firstDeadline.getTime() + 100), { what: "the first run's deadline to pass" });
    expect(await row(handle.workflowId)).toMatchObject({ status: 'PENDING', attempts: 2, error: null });
    tasks.release('deadline#2');
    await expect(handle.getResult({ timeoutMs: 5000 })).resolves.toBe('deadline#2');
    tasks.release('deadline#1');
    await waitFor(() => app.queues.abandonedRuns().length === 0, { what: 'no abandoned run' });
  });

  describe('duplicate policies need a deduplication ID', () => {
    it.each(['return-existing', 'replace'] as const)(
      "refuses onDuplicate '%s' without one, before writing",
      async (onDuplicate) => {
        const before = await rowCount();
        await expect(app.queues.enqueue('plain', tasks.quick, ['x'], { onDuplicate })).rejects.toMatchObject({
          name: 'InvalidArgumentError',
          field: 'options.onDuplicate',
        });
        const bulk = app.queues.enqueueMany('plain', tasks.quick, [
          // enqueueMany's items take no policy in their type; a JavaScript caller can still pass one, and is refused.
          { args: ['ok'], options: { deduplicationId: 'bulk-ok' } },
          { args: ['bad'], options: { deduplicationId: 'bulk-bad', onDuplicate } as never },
        ]);
        await expect(bulk).rejects.toBeInstanceOf(InvalidArgumentError);
        await expect(bulk).rejects.toMatchObject({ field: 'items[1].options.onDuplicate' });
        expect(await rowCount()).toBe(before);
      },
    );
  });

  describe('DELAYED', () => {
    it('reports a workflow waiting for its start time as DELAYED in getStatus, list, filters and counts; it holds its key', async () => {
      const delayed = await app.queues.enqueue('held', tasks.quick, ['later'], {
        delayMs: 60_000,
        deduplicationId: 'delayed-key',
      });
      await app.queues.pauseQueue('held');
      const ready = await app.queues.enqueue('held', tasks.quick, ['ready']);
      try {
        const status = await delayed.getStatus();
        expect(status).toMatchObject({ status: 'DELAYED', notBefore: expect.any(Date) });
        expect(status.notBefore!.getTime()).toBeGreaterThan(Date.now() + 50_000);
        expect((await row(delayed.workflowId)).status).toBe('ENQUEUED');
        const ids = (listed: WorkflowStatusInfo[]) => listed.map((workflow) => workflow.workflowId);
        expect(ids(await app.queues.list({ queueName: 'held', status: 'DELAYED' }))).toEqual([delayed.workflowId]);
        expect(ids(await app.queues.list({ queueName: 'held', status: 'ENQUEUED' }))).toEqual([ready.workflowId]);
        const notStarted = await app.queues.list({ queueName: 'held', status: ['ENQUEUED', 'DELAYED'] });
        expect(ids(notStarted)).toEqual([ready.workflowId, delayed.workflowId]);
        expect((await app.queues.list({ queueName: 'held' })).map((workflow) => workflow.status)).toEqual([
          'ENQUEUED',
          'DELAYED',
        ]);
        await expect(app.queues.countByStatus('held')).resolves.toEqual({ held: { ENQUEUED: 1, DELAYED: 1 } });
        const duplicate = app.queues.enqueue('held', tasks.quick, ['dup'], { deduplicationId: 'delayed-key' });
        await expect(duplicate).rejects.toBeInstanceOf(QueueDeduplicatedError);

        // Due now: ENQUEUED by the database clock, without anything rewriting the row.
        await app.queues.reschedule(delayed.workflowId, { delayMs: 0 });
        await expect(delayed.getStatus()).resolves.toMatchObject({ status: 'ENQUEUED' });
        await expect(app.queues.countByStatus('held')).resolves.toEqual({ held: { ENQUEUED: 2 } });
      } finally {
        await app.queues.resumeQueue('held');
      }
      await expect(delayed.getResult({ timeoutMs: 5000 })).resolves.toBe('later');
      await ready.getResult({ timeoutMs: 5000 });
    });

    it('a retry backoff is DELAYED with the last error; resume runs it at once, the attempt counters go on', async () => {
      const handle = await app.queues.enqueue('plain', tasks.failsEveryTime, ['retry'], { priority: 7 });
      await waitFor(async () => (await row(handle.workflowId)).failed_attempts === 1, { what: 'the first failure' });
      await expect(handle.getStatus()).resolves.toMatchObject({
        status: 'DELAYED',
        attempts: 1,
        error: { message: 'retry#1 failed' },
      });
      const listed = await app.queues.list({ status: 'DELAYED', workflowName: 'ParityTasks.failsEveryTime' });
      expect(listed.map((workflow) => workflow.workflowId)).toEqual([handle.workflowId]);

      await app.queues.cancel(handle.workflowId);
      const resumedAt = Date.now();
      await app.queues.resume(handle.workflowId);
      const error: WorkflowFailedError = await handle.getResult({ timeoutMs: 5000 }).catch((caught) => caught);
      expect(error).toBeInstanceOf(WorkflowFailedError);
      expect(error.message).toContain('retry#2 failed');
      expect(startOf('retry#2')!.at - resumedAt).toBeLessThan(5000);
      // The retry budget is not refreshed: the second run was the last of maxAttempts 2.
      expect(await row(handle.workflowId)).toMatchObject({
        status: 'ERROR',
        attempts: 2,
        failed_attempts: 2,
        recovery_attempts: 0,
        priority: 7,
      });
    });
  });

  describe('resume', () => {
    it('drops the delay of a cancelled DELAYED workflow and keeps its priority; an ENQUEUED or DELAYED one is left as it is', async () => {
      const options = { delayMs: 60_000, priority: 5, deduplicationId: 'rd' };
      const delayed = await app.queues.enqueue('plain', tasks.quick, ['resume-delayed'], options);
      const untouched = await row(delayed.workflowId);
      await app.queues.resume(delayed.workflowId);
      expect(await row(delayed.workflowId)).toEqual(untouched);
      await expect(delayed.getStatus()).resolves.toMatchObject({ status: 'DELAYED' });

      await app.queues.cancel(delayed.workflowId);
      await app.queues.resume(delayed.workflowId);
      await expect(delayed.getResult({ timeoutMs: 5000 })).resolves.toBe('resume-delayed');
      expect(await row(delayed.workflowId)).toMatchObject({
        status: 'SUCCESS',
        not_before: null,
        priority: 5,
        attempts: 1,
        recovery_attempts: 0,
        deduplication_id: 'rd',
      });

      await app.queues.pauseQueue('held');
      const enqueued = await app.queues.enqueue('held', tasks.quick, ['resume-enqueued']);
      try {
        const before = await row(enqueued.workflowId);
        await app.queues.resume(enqueued.workflowId);
        expect(await row(enqueued.workflowId)).toEqual(before);
        expect(startOf('resume-enqueued#1')).toBeUndefined();
      } finally {
        await app.queues.resumeQueue('held');
      }
      await expect(enqueued.getResult({ timeoutMs: 5000 })).resolves.toBe('resume-enqueued');
    });
  });

  describe('recorded step errors after a replay', () => {
    it("revive this library's and JavaScript's classes with their fields; a user's class comes back as Error with its name", async () => {
      const holder = await app.queues.enqueue('plain', tasks.quick, ['holder'], {
        delayMs: 60_000,
        deduplicationId: 'err-held',
      });
      const handle = await app.queues.enqueue('plain', tasks.catchesStepErrors, ['err-held']);
      await waitFor(() => tasks.caught.length === 1, { what: 'the first run to catch its step errors' });
      const [firstStep] = (await steps(handle.workflowId)).sort((a, b) => a.step_index - b.step_index);
      expect(firstStep.error).toMatchObject({
        name: 'QueueDeduplicatedError',
        fields: { queueName: 'plain', deduplicationId: 'err-held', existingWorkflowId: holder.workflowId },
      });

      await app.queues.cancel(handle.workflowId);
      await app.queues.resume(handle.workflowId);
      const replayed = await handle.getResult({ timeoutMs: 5000 });
      const [first, second] = tasks.caught;
      expect([first.attempt, second.attempt]).toEqual([1, 2]);
      expect(replayed).toEqual(second.seen);
      expect(second.seen).toEqual(afterReplay(first.seen));
      expect(first.seen[0]).toMatchObject({
        name: 'QueueDeduplicatedError',
        isQueueDeduplicatedError: true,
        fields: { existingWorkflowId: holder.workflowId },
      });
      expect(first.seen[1]).toMatchObject({ name: 'TypeError', isTypeError: true });
      expect(first.seen[2]).toMatchObject({
        name: 'PaymentDeclinedError',
        isPaymentDeclinedError: true,
        fields: { code: 'card_declined', amount: 42 },
      });
      expect(second.seen.every((error) => error.isError && error.hasStack)).toBe(true);
      await app.queues.cancel(holder.workflowId);
    });

    it('a recovery by another executor, after the first one shut down mid-run, replays them the same way', async () => {
      const holdKey = { delayMs: 60_000, deduplicationId: 'recovery-held' };
      const holder = await app.queues.enqueue('plain', tasks.quick, ['recovery-holder'], holdKey);
      const options = {
        schema,
        queues: QUEUES,
        worker: { queues: ['recovery'] },
        shutdownGraceMs: 50,
        heartbeatIntervalMs: 200,
      };
      const leaving = await startQueueApp(options, [ParityTasks]);
      const leavingTasks = leaving.get(ParityTasks);
      const { workflowId } = await leaving.queues.enqueue('recovery', leavingTasks.catchesStepErrors, [
        'recovery-held',
      ]);
      await waitFor(() => leavingTasks.caught.length === 1, { what: 'the first run to catch its step errors' });
      await leaving.close();
      // Left unfinished: PENDING under the executor that left, or ENQUEUED already if a sweep of this test's other
      // app recovered it (the executor removes its lease as it shuts down).
      const left = await row(workflowId);
      expect(left).toMatchObject({ attempts: 1 });
      expect(['PENDING', 'ENQUEUED']).toContain(left.status);

      const peer = await startQueueApp(options, [ParityTasks]);
      try {
        const replayed = await (await peer.queues.retrieve<SeenError[]>(workflowId)).getResult({ timeoutMs: 10_000 });
        const [recovered] = peer.get(ParityTasks).caught;
        expect(recovered.attempt).toBe(2);
        expect(replayed).toEqual(recovered.seen);
        expect(recovered.seen).toEqual(afterReplay(leavingTasks.caught[0].seen));
        expect(await row(workflowId)).toMatchObject({ status: 'SUCCESS', attempts: 2, recovery_attempts: 1 });
      } finally {
        await peer.close();
      }
      await app.queues.cancel(holder.workflowId);
    });
  });
});
