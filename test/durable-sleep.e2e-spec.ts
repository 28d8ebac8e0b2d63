import { QueueDeduplicatedError, WorkflowCancelledError, WorkflowHandle } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import type { WaitingTasks } from './fixtures/waiting-tasks';
import { useWaitingSuite } from './fixtures/waiting-suite';
import type { QueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

/**
 * Durable sleep with real worker processes (child-waiting-worker.ts: queue `naps` with `concurrency: 1`): a sleeping
 * workflow is WAITING, holds its key but no slot, and wakes at its recorded time, also after its process was
 * SIGKILLed mid-sleep. The test's own app enqueues and looks up (worker: false).
 */
describe('durable sleep', () => {
  const suite = useWaitingSuite('sleep');
  const { schema, startWorker } = suite;
  let pool: Pool;
  let app: QueueApp;
  let tasks: WaitingTasks;

  beforeAll(() => {
    pool = suite.pool();
    app = suite.app();
    tasks = suite.tasks();
  });

  const statusOf = async (handle: WorkflowHandle) => (await handle.getStatus()).status;

  const waitForStatus = (handle: WorkflowHandle, status: string) =>
    waitFor(async () => (await statusOf(handle)) === status, {
      timeoutMs: 20_000,
      what: `${handle.workflowId} ${status}`,
    });

  /** The wake-up time recorded by the workflow's sleep (its first step). */
  const recordedWakeUp = async (workflowId: string) => {
    const { rows } = await pool.query(
      `SELECT step_name, output #>> '{}' AS wake_at FROM "${schema}".steps WHERE workflow_id = $1 AND step_index = 0`,
      [workflowId],
    );
    expect(rows).toEqual([{ step_name: 'sleep', wake_at: expect.any(String) }]);
    return new Date(rows[0].wake_at as string);
  };

  const eventsOf = async (workflowId: string) =>
    (
      await pool.query<{ kind: string; at: Date }>(
        `SELECT kind, at FROM "${schema}".events WHERE workflow_id = $1 ORDER BY seq`,
        [workflowId],
      )
    ).rows;

  it('lets another workflow of a concurrency-1 queue run while it sleeps, keeps its key, and wakes on time', async () => {
    await startWorker('sleep-slots');
    const sleeper = await app.queues.enqueue('naps', tasks.nap, ['sleeper', 3000], { deduplicationId: 'nap-key' });
    await waitForStatus(sleeper, 'WAITING');
    const wakeAt = await recordedWakeUp(sleeper.workflowId);
    const waiting = await sleeper.getStatus();
    expect(waiting).toMatchObject({ status: 'WAITING', executorId: null, deduplicationId: 'nap-key' });
    expect(Math.abs(waiting.notBefore!.getTime() - wakeAt.getTime())).toBeLessThan(2);

    const other = await app.queues.enqueue('naps', tasks.quick, ['other']);
    await expect(other.getResult({ timeoutMs: 10_000 })).resolves.toBe('other');
    expect(await statusOf(sleeper)).toBe('WAITING');

    const duplicate = await app.queues.enqueue('naps', tasks.nap, ['again', 10], { deduplicationId: 'nap-key' }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(duplicate).toBeInstanceOf(QueueDeduplicatedError);
    expect(duplicate).toMatchObject({ existingWorkflowId: sleeper.workflowId });

    expect((await app.queues.countByStatus('naps')).naps).toMatchObject({ WAITING: 1 });
    const listed = await app.queues.list({ queueName: 'naps', status: 'WAITING' });
    expect(listed.map((workflow) => workflow.workflowId)).toEqual([sleeper.workflowId]);

    await expect(sleeper.getResult({ timeoutMs: 15_000 })).resolves.toBe('sleeper');
    const events = await eventsOf(sleeper.workflowId);
    expect(events.map((event) => event.kind)).toEqual(['before', 'before', 'after']);
    const woke = events[2].at.getTime() - wakeAt.getTime();
    expect(woke).toBeGreaterThanOrEqual(0);
    expect(woke).toBeLessThan(1500);
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM "${schema}".steps WHERE workflow_id = $1`, [
      sleeper.workflowId,
    ]);
    expect(rows).toEqual([{ n: 1 }]);
  });

  it('after a SIGKILL mid-sleep, wakes at the recorded time, not a full sleep later', async () => {
    const first = await startWorker('sleep-killed');
    const sleeper = await app.queues.enqueue('naps', tasks.nap, ['recovered', 5000]);
    await waitForStatus(sleeper, 'WAITING');
    const wakeAt = await recordedWakeUp(sleeper.workflowId);
    // Half-way through the sleep: a full sleep after the restart would end 2.5 s after the recorded time at least.
    await waitFor(() => Date.now() >= wakeAt.getTime() - 2500, { what: 'half of the sleep to pass' });
    first.child.kill('SIGKILL');
    expect(await first.ended).toEqual({ code: null, signal: 'SIGKILL' });
    await startWorker('sleep-restarted');
    // NOTE: a full sleep after the restart would end 2.5 s after the recorded time at least; on a loaded machine the
    // new process may boot after the recorded time, and then wakes the sleeper at once.
    const wakesBy = Math.max(wakeAt.getTime(), Date.now()) + 1500;

    await expect(sleeper.getResult({ timeoutMs: 15_000 })).resolves.toBe('recovered');
    const events = await eventsOf(sleeper.workflowId);
    expect(events.map((event) => event.kind)).toEqual(['before', 'before', 'after']);
    expect(events[2].at.getTime()).toBeGreaterThanOrEqual(wakeAt.getTime());
    expect(events[2].at.getTime()).toBeLessThan(wakesBy);
    // A full sleep from the re-execution would end 2.5 s or more after it began; what remained was at most that.
    expect(events[2].at.getTime() - events[1].at.getTime()).toBeLessThan(2500);
  });

  it('counts the time asleep towards timeoutMs, and cancels a sleeping workflow at once, freeing its key', async () => {
    await startWorker('sleep-ended');
    const timed = await app.queues.enqueue('naps', tasks.nap, ['timed', 60_000], { timeoutMs: 2000 });
    const cancelled = await app.queues.enqueue('naps', tasks.nap, ['cancelled', 60_000], { deduplicationId: 'k2' });
    await waitForStatus(cancelled, 'WAITING');
    await expect(app.queues.cancel(cancelled.workflowId)).resolves.toBe('CANCELLED');
    await expect(cancelled.getResult()).rejects.toBeInstanceOf(WorkflowCancelledError);
    const next = await app.queues.enqueue('naps', tasks.quick, ['next'], { deduplicationId: 'k2' });
    await expect(next.getResult({ timeoutMs: 10_000 })).resolves.toBe('next');

    await expect(timed.getResult({ timeoutMs: 15_000 })).rejects.toBeInstanceOf(WorkflowCancelledError);
    expect((await timed.getStatus()).error).toMatchObject({ name: 'WorkflowTimeoutError' });
    expect((await eventsOf(timed.workflowId)).map((event) => event.kind)).toEqual(['before']);
  });

  it('sleeps a short time in the process, holding its slot', async () => {
    await startWorker('sleep-short');
    const napper = await app.queues.enqueue('naps', tasks.nap, ['short', 300]);
    await expect(napper.getResult({ timeoutMs: 10_000 })).resolves.toBe('short');
    expect((await eventsOf(napper.workflowId)).map((event) => event.kind)).toEqual(['before', 'after']);
    expect((await napper.getStatus()).attempts).toBe(1);
  });
});
