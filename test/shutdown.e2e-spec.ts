import { Injectable, Logger, Provider } from '@nestjs/common';
import { DedupQueueModuleOptions, OnWorkflowEvent, WorkflowEvent } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { killFixtures, spawnFixture } from './fixtures/child-harness';
import { HoldingTasks } from './fixtures/child-worker';
import { RecordingTasks } from './fixtures/recording-tasks';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

/** Keeps the lifecycle events its `@OnWorkflowEvent()` handler receives. */
@Injectable()
class EventLog {
  readonly events: WorkflowEvent[] = [];

  @OnWorkflowEvent('completed')
  @OnWorkflowEvent('failed')
  @OnWorkflowEvent('cancelled')
  record(event: WorkflowEvent): void {
    this.events.push(event);
  }
}

describe('graceful shutdown', () => {
  const schema = uniqueSchema('shutdown');
  let pool: Pool;
  /** A worker-less app on the same schema: enqueues into every queue of this file, never runs anything. */
  let enqueuer: QueueApp;
  /** Every app this file started, with its close() once called, so afterAll closes each exactly once. */
  const apps = new Map<QueueApp, Promise<void> | undefined>();

  async function startApp(
    options: Partial<DedupQueueModuleOptions>,
    providers: Provider[] = [RecordingTasks],
  ): Promise<QueueApp> {
    const app = await startQueueApp({ schema, ...options }, providers);
    apps.set(app, undefined);
    return app;
  }

  function closeApp(app: QueueApp): Promise<void> {
    const closing = apps.get(app) ?? app.close();
    apps.set(app, closing);
    return closing;
  }

  beforeAll(async () => {
    pool = testPool();
    enqueuer = await startApp(
      { worker: false, queues: [{ name: 'drain' }, { name: 'inflight' }, { name: 'grace' }, { name: 'sigterm' }] },
      [RecordingTasks, HoldingTasks],
    );
    await pool.query(`CREATE TABLE "${schema}".events (seq serial PRIMARY KEY, kind text NOT NULL, key text NOT NULL)`);
    await pool.query(`CREATE TABLE "${schema}".release (key text PRIMARY KEY)`);
  });

  afterAll(async () => {
    await killFixtures();
    for (const app of apps.keys()) {
      for (const gate of app.get(RecordingTasks).gates.values()) gate.open();
      await closeApp(app);
    }
    await dropSchema(pool, schema);
    await pool.end();
  });

  const rowOf = async (workflowId: string) =>
    (
      await pool.query(
        `SELECT status, output, error, executor_id, attempts, completed_at FROM "${schema}".workflows WHERE workflow_id = $1`,
        [workflowId],
      )
    ).rows[0];

  const statusOf = async (workflowId: string): Promise<string> => (await rowOf(workflowId))?.status;

  /**
   * Whether the app whose connections carry `applicationName` listens for wake-ups (its listener connection's last
   * statement is LISTEN). At shutdown the scheduler stops claiming and then stops listening (UNLISTEN, or the
   * connection closes) before it waits for running workflows, so "no longer listening" means shutdown has begun.
   */
  const isListening = async (applicationName: string): Promise<boolean> =>
    (
      await pool.query(
        `SELECT count(*)::int AS count FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'`,
        [applicationName],
      )
    ).rows[0].count > 0;

  const stoppedListening = (applicationName: string) =>
    waitFor(async () => !(await isListening(applicationName)), { what: `${applicationName} to begin its shutdown` });

  it('waits for a running workflow and records its result, claiming nothing new meanwhile', async () => {
    const applicationName = `closing-${schema}`;
    // One slot, busy with the first workflow: the only chance to claim the second is the slot it frees at shutdown.
    const app = await startApp({
      connection: { url: databaseUrl(), applicationName },
      queues: [{ name: 'drain', workerConcurrency: 1 }],
      pollIntervalMs: 50,
    });
    const tasks = app.get(RecordingTasks);
    const first = await app.queues.enqueue('drain', tasks.blocked, ['drain-first']);
    await waitFor(async () => (await statusOf(first.workflowId)) === 'PENDING', { what: 'the first workflow to run' });

    let released = false;
    let closed = false;
    expect(await isListening(applicationName)).toBe(true);
    const logged = jest.spyOn(Logger.prototype, 'log');
    const closing = closeApp(app).then(() => {
      closed = true;
      return { releasedBeforeClose: released };
    });
    await stoppedListening(applicationName);
    const second = await enqueuer.queues.enqueue('drain', enqueuer.get(RecordingTasks).echo, ['late']);
    expect(closed).toBe(false);
    expect(await statusOf(first.workflowId)).toBe('PENDING');

    released = true;
    tasks.gate('drain-first').open();
    await expect(closing).resolves.toEqual({ releasedBeforeClose: true });
    const waiting = logged.mock.calls.map(([message]) => String(message)).filter((line) => /^Shutting down/.test(line));
    logged.mockRestore();
    expect(waiting).toEqual(['Shutting down: waiting up to 30000 ms for 1 running workflow(s)']);

    expect(await rowOf(first.workflowId)).toMatchObject({ status: 'SUCCESS', output: 'done drain-first', error: null });
    expect(await rowOf(second.workflowId)).toMatchObject({ status: 'ENQUEUED', executor_id: null, attempts: 0 });
    expect(tasks.calls.filter((call) => call.name === 'echo')).toEqual([]);
    await expect(enqueuer.queues.cancel(second.workflowId)).resolves.toBe('CANCELLED');
  });

  it('does not lose a workflow whose claim is in flight when shutdown begins: it stays ENQUEUED or ends recorded', async () => {
    const applicationName = `inflight-${schema}`;
    const waiting = await enqueuer.queues.enqueue('inflight', enqueuer.get(RecordingTasks).echo, ['in flight']);
    await pool.query(
      `UPDATE "${schema}".workflow_queue SET not_before = now() + interval '1 hour' WHERE workflow_id = $1`,
      [waiting.workflowId],
    );
    const app = await startApp({ connection: { url: databaseUrl(), applicationName }, queues: [{ name: 'inflight' }] });
    const tasks = app.get(RecordingTasks);
    // Holding an EXCLUSIVE lock on the table (plain reads still pass) makes the app's next claim wait in Postgres;
    // the same transaction makes the workflow due, and a notification from another connection wakes the app.
    const locker = await pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${schema}".workflow_queue IN EXCLUSIVE MODE`);
      await locker.query(`UPDATE "${schema}".workflow_queue SET not_before = NULL WHERE workflow_id = $1`, [
        waiting.workflowId,
      ]);
      await pool.query('SELECT pg_notify($1, $2)', [`dedup_queue:${schema}`, 'inflight']);
      await waitFor(
        async () =>
          (
            await pool.query(
              `SELECT count(*)::int AS count FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
              [applicationName],
            )
          ).rows[0].count === 1,
        { what: 'the claim to wait for the table lock' },
      );

      expect(await isListening(applicationName)).toBe(true);
      const closing = closeApp(app);
      await stoppedListening(applicationName);
      await locker.query('COMMIT');
      await closing;

      const bodyRan = tasks.calls.some((call) => call.args[0] === 'in flight');
      const { status } = await rowOf(waiting.workflowId);
      // A workflow claimed during shutdown must either not start (and stay ENQUEUED for another worker) or run to a
      // recorded end. PENDING means a closed app holds it without recording an outcome.
      // (A regression test: the claim in flight used to be started after the outcome writer had closed.)
      const expected = bodyRan ? { status: 'SUCCESS', bodyRan: true } : { status: 'ENQUEUED', bodyRan: false };
      expect({ status, bodyRan }).toEqual(expected);
    } finally {
      await locker.query('ROLLBACK').catch(() => undefined);
      locker.release();
    }
  });

  it('delivers the lifecycle event of a workflow that finishes during a graceful shutdown, once', async () => {
    const applicationName = `events-${schema}`;
    const app = await startApp({ connection: { url: databaseUrl(), applicationName }, queues: [{ name: 'drain' }] }, [
      RecordingTasks,
      EventLog,
    ]);
    const tasks = app.get(RecordingTasks);
    const running = await app.queues.enqueue('drain', tasks.blocked, ['events-last']);
    await waitFor(async () => (await statusOf(running.workflowId)) === 'PENDING', { what: 'the workflow to run' });
    const closing = closeApp(app);
    await stoppedListening(applicationName);
    tasks.gate('events-last').open();
    await closing;

    expect(await statusOf(running.workflowId)).toBe('SUCCESS');
    expect(app.get(EventLog).events).toEqual([
      expect.objectContaining({ event: 'completed', workflowId: running.workflowId, attempt: 1 }),
    ]);
  });

  it('stops waiting after shutdownGraceMs and leaves the still-running workflow PENDING', async () => {
    const app = await startApp({ queues: [{ name: 'grace' }], shutdownGraceMs: 200 });
    const tasks = app.get(RecordingTasks);
    const stuck = await app.queues.enqueue('grace', tasks.blocked, ['never-released']);
    await waitFor(async () => (await statusOf(stuck.workflowId)) === 'PENDING', { what: 'the workflow to run' });

    await closeApp(app);

    expect(tasks.running).toBe(1);
    expect(await rowOf(stuck.workflowId)).toMatchObject({
      status: 'PENDING',
      output: null,
      error: null,
      completed_at: null,
      attempts: 1,
    });
    // When the body does end later, the closed app records nothing: the workflow stays PENDING for recovery.
    tasks.gate('never-released').open();
    await waitFor(() => tasks.running === 0, { what: 'the body to return' });
    expect(await statusOf(stuck.workflowId)).toBe('PENDING');
  });

  it('keeps a worker process alive after SIGTERM until its running workflow ends, then exits with code 0', async () => {
    const applicationName = `worker-${schema}`;
    const worker = spawnFixture('child-worker.ts', 'worker', { SCHEMA: schema, APPLICATION_NAME: applicationName });
    await worker.message('ready');
    const handle = await enqueuer.queues.enqueue('sigterm', enqueuer.get(HoldingTasks).hold, ['sigterm-1']);
    const events = async () =>
      (await pool.query(`SELECT kind FROM "${schema}".events WHERE key = 'sigterm-1' ORDER BY seq`)).rows.map(
        (row) => row.kind,
      );
    await waitFor(async () => (await events()).includes('started'), { what: 'the workflow to start in the child' });

    expect(await isListening(applicationName)).toBe(true);
    worker.child.kill('SIGTERM');
    await worker.message('sigterm');
    await stoppedListening(applicationName);
    expect(worker.hasEnded).toBe(false);
    expect(await statusOf(handle.workflowId)).toBe('PENDING');

    await pool.query(`INSERT INTO "${schema}".release (key) VALUES ('sigterm-1')`);
    await expect(worker.waitForExit()).resolves.toEqual({ code: 0, signal: null });

    expect(await events()).toEqual(['started', 'finished']);
    expect(await rowOf(handle.workflowId)).toMatchObject({
      status: 'SUCCESS',
      output: 'released sigterm-1',
      error: null,
    });
  });
});
