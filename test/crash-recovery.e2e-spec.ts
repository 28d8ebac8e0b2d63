import { performance } from 'node:perf_hooks';
import { QueueDeduplicatedError, WorkflowCancelledError, WorkflowHandle } from 'nest-dedup-queue';
import { ExecutorStore, QueueDatabase } from 'nest-dedup-queue/testing';
import type { Pool } from 'pg';
import { DataSource } from 'typeorm';
import { DurableSteps, DurableTasks, durableTablesSql } from './fixtures/child-durable-tasks';
import type { FixtureProcess } from './fixtures/child-harness';
import { databaseUrl } from './support/database';
import type { QueueApp } from './support/queue-app';
import { useWorkerSuite } from './support/worker-suite';
import { waitFor } from './support/wait-for';

/**
 * Crash recovery with real worker processes (child-durable-worker.ts) killed with SIGKILL, on a real Postgres.
 * Workers use leaseMs 1500 and heartbeatIntervalMs 300 unless a test says otherwise. Each test kills its children
 * and ends whatever it left active, so the next test starts with no live executor and nothing to recover.
 */
describe('crash recovery', () => {
  const suite = useWorkerSuite({
    prefix: 'crash',
    queues: [{ name: 'durable' }, { name: 'serial' }],
    providers: [DurableSteps, DurableTasks],
    tasks: DurableTasks,
    tablesSql: durableTablesSql,
    worker: 'child-durable-worker.ts',
    cleanUpAfterEach: true,
  });
  const { schema, release, startWorker, spawnWorker, sigkill } = suite;
  let pool: Pool;
  /** Worker-less: enqueues, cancels, resumes; never runs a workflow, never recovers anything. */
  let app: QueueApp;
  let tasks: DurableTasks;

  beforeAll(() => ({ pool, app, tasks } = suite));

  const rowOf = async (workflowId: string) =>
    (
      await pool.query(
        `SELECT status, output, error, executor_id, attempts, recovery_attempts, deduplication_id,
                active_deduplication_id, started_at, completed_at, deadline_at
         FROM "${schema}".workflows WHERE workflow_id = $1`,
        [workflowId],
      )
    ).rows[0];

  const eventsOf = async (workflowId: string) =>
    (
      await pool.query(
        `SELECT kind, executor_id, attempt FROM "${schema}".events WHERE workflow_id = $1 ORDER BY seq`,
        [workflowId],
      )
    ).rows;

  const kindsOf = async (workflowId: string) => (await eventsOf(workflowId)).map((event) => event.kind as string);

  const sideEffectsOf = async (workflowId: string) =>
    (
      await pool.query(`SELECT id, step, token FROM "${schema}".side_effects WHERE workflow_id = $1 ORDER BY id`, [
        workflowId,
      ])
    ).rows;

  const executorIds = async () =>
    (await pool.query(`SELECT executor_id FROM "${schema}".executors ORDER BY executor_id`)).rows.map(
      (row) => row.executor_id,
    );

  const waitForStatus = (workflowId: string, status: string, timeoutMs = 20_000) =>
    waitFor(async () => (await rowOf(workflowId))?.status === status, {
      timeoutMs,
      what: `${workflowId} to be ${status}`,
    });

  /** Enqueues with `deduplicationId` and returns the error, which must be a QueueDeduplicatedError. */
  const duplicateEnqueueError = (key: string) =>
    app.queues.enqueue('durable', tasks.hold, [`${key}-again`], { deduplicationId: key }).then(
      (handle) => new Error(`the duplicate enqueue created ${handle.workflowId}`),
      (error: unknown) => error,
    );

  /**
   * Enqueues `DurableTasks.record` into `serial` (workerConcurrency 1) and waits for its SUCCESS: the serial slot
   * was free, so whatever ran there before has returned and been handled by its worker.
   */
  async function serialMarker(key: string, deduplicationId?: string): Promise<void> {
    const marker = await app.queues.enqueue('serial', tasks.record, [key], { deduplicationId });
    await expect(marker.getResult({ timeoutMs: 15_000 })).resolves.toBe(`recorded ${key}`);
  }

  it('keeps the key of a SIGKILLed worker held; a restart with the same executorId finishes the workflow', async () => {
    const key = 'same-id';
    const first = await startWorker('same-id-worker');
    const handle = await app.queues.enqueue('durable', tasks.hold, [key], { deduplicationId: key });
    await first.message('started', { key });
    await sigkill(first);

    expect(await rowOf(handle.workflowId)).toMatchObject({
      status: 'PENDING',
      executor_id: 'same-id-worker',
      attempts: 1,
      recovery_attempts: 0,
      active_deduplication_id: key,
    });
    const duplicate = await duplicateEnqueueError(key);
    expect(duplicate).toBeInstanceOf(QueueDeduplicatedError);
    expect(duplicate).toMatchObject({
      queueName: 'durable',
      deduplicationId: key,
      existingWorkflowId: handle.workflowId,
    });
    expect(
      (await pool.query(`SELECT count(*)::int AS n FROM "${schema}".workflows WHERE deduplication_id = $1`, [key]))
        .rows[0].n,
    ).toBe(1);

    await release(key);
    const spawnedAt = performance.now();
    const restarted = spawnWorker('same-id-worker');
    await restarted.message('ready');
    const readyAt = performance.now();
    await waitForStatus(handle.workflowId, 'SUCCESS');
    const doneAt = performance.now();
    console.log(
      `[crash-recovery] same-executorId restart: ${Math.round(doneAt - spawnedAt)} ms from spawning the new process to SUCCESS ` +
        `(${Math.round(readyAt - spawnedAt)} ms process start and boot, ${Math.round(doneAt - readyAt)} ms from ready to SUCCESS)`,
    );

    expect(await rowOf(handle.workflowId)).toMatchObject({
      status: 'SUCCESS',
      output: `released ${key} by same-id-worker`,
      executor_id: 'same-id-worker',
      attempts: 2,
      recovery_attempts: 1,
      active_deduplication_id: null,
    });
    expect(await eventsOf(handle.workflowId)).toEqual([
      { kind: 'started', executor_id: 'same-id-worker', attempt: 1 },
      { kind: 'started', executor_id: 'same-id-worker', attempt: 2 },
      { kind: 'finished', executor_id: 'same-id-worker', attempt: 2 },
    ]);
    await expect(handle.getResult()).resolves.toBe(`released ${key} by same-id-worker`);
  });

  it('lets a live peer with another executorId finish the workflow of a SIGKILLed worker once its lease expires', async () => {
    const key = 'lease-path';
    const dead = await startWorker('lease-dead');
    const handle = await app.queues.enqueue('durable', tasks.hold, [key], { deduplicationId: key });
    await dead.message('started', { key });
    const peer = await startWorker('lease-peer');

    const killedAt = performance.now();
    await sigkill(dead);
    await release(key);
    const {
      rows: [lastBeat],
    } = await pool.query(`SELECT heartbeat_at FROM "${schema}".executors WHERE executor_id = 'lease-dead'`);
    expect(lastBeat).toBeDefined();
    expect(await duplicateEnqueueError(key)).toMatchObject({
      name: 'QueueDeduplicatedError',
      existingWorkflowId: handle.workflowId,
    });

    await waitForStatus(handle.workflowId, 'SUCCESS');
    console.log(
      `[crash-recovery] lease path (leaseMs 1500, heartbeatIntervalMs 300): ${Math.round(performance.now() - killedAt)} ms ` +
        'from SIGKILL to SUCCESS on the live peer',
    );

    const row = await rowOf(handle.workflowId);
    expect(row).toMatchObject({
      status: 'SUCCESS',
      output: `released ${key} by lease-peer`,
      executor_id: 'lease-peer',
      attempts: 2,
      recovery_attempts: 1,
      active_deduplication_id: null,
    });
    // The peer claimed it no earlier than a full lease after the dead worker's last heartbeat (both by Postgres' clock).
    expect(row.started_at.getTime() - lastBeat.heartbeat_at.getTime()).toBeGreaterThanOrEqual(1500);
    expect(await eventsOf(handle.workflowId)).toEqual([
      { kind: 'started', executor_id: 'lease-dead', attempt: 1 },
      { kind: 'started', executor_id: 'lease-peer', attempt: 2 },
      { kind: 'finished', executor_id: 'lease-peer', attempt: 2 },
    ]);
    expect(await executorIds()).toEqual(['lease-peer']);
    expect(peer.hasEnded).toBe(false);
  });

  it('does not run a completed transactional step again after a SIGKILL: one row, and the result is the recorded output', async () => {
    const key = 'step-once';
    const first = await startWorker('step-worker');
    const handle = await app.queues.enqueue('durable', tasks.stepThenHold, [key], { deduplicationId: key });
    const { output } = await first.message<{ type: 'step-done'; output: { id: number; token: string } }>('step-done', {
      key,
    });
    await sigkill(first);

    expect(await sideEffectsOf(handle.workflowId)).toEqual([{ id: output.id, step: 'only', token: output.token }]);
    const checkpoints = async () =>
      (
        await pool.query(`SELECT step_index, step_name, output, error FROM "${schema}".steps WHERE workflow_id = $1`, [
          handle.workflowId,
        ])
      ).rows;
    expect(await checkpoints()).toEqual([{ step_index: 0, step_name: 'insertSideEffect', output, error: null }]);

    await release(key);
    const restarted = spawnWorker('step-worker');
    await waitForStatus(handle.workflowId, 'SUCCESS');

    await expect(handle.getResult()).resolves.toEqual(output);
    expect((await restarted.message('step-done', { key })).output).toEqual(output);
    expect(await sideEffectsOf(handle.workflowId)).toEqual([{ id: output.id, step: 'only', token: output.token }]);
    expect(await checkpoints()).toEqual([{ step_index: 0, step_name: 'insertSideEffect', output, error: null }]);
    expect(await rowOf(handle.workflowId)).toMatchObject({ status: 'SUCCESS', attempts: 2, recovery_attempts: 1 });
    expect(await kindsOf(handle.workflowId)).toEqual(['started', 'started']);
  });

  it('runs each workflow of an expired executor once when two live executors notice the expiry at the same moment', async () => {
    const count = 20;
    const names = ['race-1', 'race-2'];
    const appNames = names.map((name) => `${name}-${schema}`);
    await Promise.all(
      names.map((name, i) => startWorker(name, { HEARTBEAT_MS: '100', APPLICATION_NAME: appNames[i] })),
    );
    const workflowIds = Array.from({ length: count }, (_, i) => `race-wf-${i}`);

    // While the test holds an EXCLUSIVE lock on executors, both workers' next expiry sweep (the statement
    // `DELETE FROM executors WHERE heartbeat_at < ...` of ExecutorStore.recoverExpired) waits for it; the dead executor and its PENDING workflows commit together with the lock's release, so
    // both sweeps go on at the same instant, and both see the expired lease.
    const locker = await pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${schema}".executors IN EXCLUSIVE MODE`);
      await locker.query(
        `INSERT INTO "${schema}".executors (executor_id, hostname, pid, started_at, heartbeat_at)
         VALUES ('race-dead', 'gone', 0, now() - interval '2 hours', now() - interval '1 hour')`,
      );
      await locker.query(
        `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, deduplication_id,
            active_deduplication_id, inputs, executor_id, attempts, started_at)
         SELECT id, 'durable', 'DurableTasks.record', 'PENDING', id, id, json_build_array(id), 'race-dead', 1,
                now() - interval '1 hour'
         FROM unnest($1::text[]) AS id`,
        [workflowIds],
      );
      await waitFor(
        async () =>
          (
            await pool.query(
              `SELECT count(DISTINCT application_name)::int AS n FROM pg_stat_activity
               WHERE application_name = ANY($1) AND wait_event_type = 'Lock'
                 AND query LIKE '%DELETE FROM%executors WHERE heartbeat_at%'`,
              [appNames],
            )
          ).rows[0].n === 2,
        { what: "both workers' sweeps to wait for the executors table" },
      );
      await locker.query('COMMIT');
    } finally {
      await locker.query('ROLLBACK').catch(() => undefined);
      locker.release();
    }

    await waitFor(
      async () =>
        (
          await pool.query(
            `SELECT count(*)::int AS n FROM "${schema}".workflows WHERE workflow_id = ANY($1) AND status = 'SUCCESS'`,
            [workflowIds],
          )
        ).rows[0].n === count,
      { timeoutMs: 20_000, what: 'every orphaned workflow to succeed' },
    );

    const { rows } = await pool.query(
      `SELECT w.workflow_id, w.status, w.output, w.attempts, w.recovery_attempts, w.active_deduplication_id,
              (SELECT count(*)::int FROM "${schema}".events e WHERE e.workflow_id = w.workflow_id AND e.kind = 'started') AS runs
       FROM "${schema}".workflows w WHERE w.workflow_id = ANY($1) ORDER BY w.workflow_id`,
      [workflowIds],
    );
    expect(rows).toEqual(
      [...workflowIds].sort().map((id) => ({
        workflow_id: id,
        status: 'SUCCESS',
        output: `recorded ${id}`,
        attempts: 2,
        recovery_attempts: 1,
        active_deduplication_id: null,
        runs: 1,
      })),
    );
    expect(await executorIds()).toEqual(names);
    const { rows: byExecutor } = await pool.query(
      `SELECT executor_id, count(*)::int AS n FROM "${schema}".events WHERE workflow_id = ANY($1) GROUP BY executor_id ORDER BY 1`,
      [workflowIds],
    );
    console.log(`[crash-recovery] orphans of one expired lease ran on: ${JSON.stringify(byExecutor)}`);
  });

  it('recovers each orphaned workflow in exactly one of 10 concurrent ExecutorStore.recoverExpired() and recoverOrphans() calls', async () => {
    const rounds = 5;
    const sweepers = 10;
    const applicationName = `sweepers-${schema}`;
    const dataSource = new DataSource({
      type: 'postgres',
      url: databaseUrl(),
      poolSize: sweepers + 2,
      applicationName,
    });
    await dataSource.initialize();
    try {
      const store = new ExecutorStore(new QueueDatabase(dataSource, schema, false));
      for (let round = 1; round <= rounds; round++) {
        // Four dead executors with six PENDING workflows each, and six PENDING workflows whose executor row is gone.
        const dead = Array.from({ length: 4 }, (_, e) => `sweep-${round}-dead-${e}`);
        const owners = [
          ...dead.flatMap((executor) => Array(6).fill(executor)),
          ...Array.from({ length: 6 }, (_, i) => `sweep-${round}-ghost-${i}`),
        ];
        const workflowIds = owners.map((_, i) => `sweep-${round}-wf-${i}`);
        await pool.query(
          `INSERT INTO "${schema}".executors (executor_id, hostname, pid, heartbeat_at)
           SELECT id, 'gone', 0, now() - interval '1 hour' FROM unnest($1::text[]) AS id`,
          [dead],
        );
        await pool.query(
          `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, deduplication_id,
              active_deduplication_id, inputs, executor_id, attempts)
           SELECT id, 'durable', 'DurableTasks.record', 'PENDING', id, id, '[]', owner, 1
           FROM unnest($1::text[], $2::text[]) AS o(id, owner)`,
          [workflowIds, owners],
        );

        // All sweeps queue behind the test's table lock and start together when it is released.
        const locker = await pool.connect();
        let results: Array<{ ids?: string[]; error?: string }>;
        try {
          await locker.query('BEGIN');
          await locker.query(`LOCK TABLE "${schema}".executors IN EXCLUSIVE MODE`);
          const calls = Array.from({ length: sweepers }, () =>
            store
              .recoverExpired(1500, ['durable'])
              .then(async (expired) => [...expired, ...(await store.recoverOrphans('durable'))])
              .then(
                (recovered) => ({ ids: recovered.map((workflow) => workflow.workflowId) }),
                (error: Error) => ({ error: error.message }),
              ),
          );
          await waitFor(
            async () =>
              (
                await pool.query(
                  `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
                  [applicationName],
                )
              ).rows[0].n === sweepers,
            { what: `${sweepers} sweeps to wait for the executors table` },
          );
          await locker.query('COMMIT');
          results = await Promise.all(calls);
        } finally {
          await locker.query('ROLLBACK').catch(() => undefined);
          locker.release();
        }

        expect(results.filter((result) => result.error !== undefined)).toEqual([]);
        const returned = results.flatMap((result) => result.ids ?? []);
        expect(returned).toHaveLength(new Set(returned).size);
        expect([...returned].sort()).toEqual([...workflowIds].sort());
        const { rows } = await pool.query(
          `SELECT status, recovery_attempts, executor_id, count(*)::int AS n FROM "${schema}".workflows
           WHERE workflow_id = ANY($1) GROUP BY 1, 2, 3`,
          [workflowIds],
        );
        expect(rows).toEqual([{ status: 'ENQUEUED', recovery_attempts: 1, executor_id: null, n: workflowIds.length }]);
        expect((await executorIds()).filter((id: string) => dead.includes(id))).toEqual([]);
        console.log(
          `[crash-recovery] sweep round ${round}: ${results.filter((result) => result.ids?.length).length} of ${sweepers} ` +
            `concurrent recoverExpired() calls recovered something (${returned.length} workflows in all)`,
        );
        await pool.query(`DELETE FROM "${schema}".workflow_queue WHERE workflow_id = ANY($1)`, [workflowIds]);
      }
    } finally {
      await dataSource.destroy();
    }
  });

  it('dead-letters a poison workflow that kills its process, frees its key, and resumes it once cured', async () => {
    const key = 'poison-pill';
    await pool.query(`INSERT INTO "${schema}".poison (key) VALUES ($1)`, [key]);
    let handle: WorkflowHandle<string> | undefined;
    let deaths = 0;
    let deadLettered = false;
    // Start the worker again (same executorId, so it recovers at once) each time the poison kills it.
    for (let run = 1; run <= 6 && !deadLettered; run++) {
      const worker = spawnWorker('poison-worker');
      if (!handle) {
        await worker.message('ready');
        handle = await app.queues.enqueue('durable', tasks.poison, [key], { deduplicationId: key });
      }
      const workflowId = handle.workflowId;
      const outcome = await waitFor(
        async () => {
          if (worker.hasEnded) return 'died';
          return (await rowOf(workflowId)).status === 'MAX_RECOVERY_ATTEMPTS_EXCEEDED' && 'dead-lettered';
        },
        { timeoutMs: 20_000, what: `run ${run} to die or dead-letter the workflow` },
      );
      if (outcome === 'died') {
        expect(await worker.ended).toEqual({ code: null, signal: 'SIGKILL' });
        deaths += 1;
      } else {
        deadLettered = true;
        await sigkill(worker); // idle; stopped so that the enqueue below is not run before the test cancels it
      }
    }
    const workflowId = handle!.workflowId;

    // @Workflow({ maxRecoveryAttempts: 2 }): the first run and two recoveries die, the third recovery dead-letters.
    expect(deadLettered).toBe(true);
    expect(deaths).toBe(3);
    expect(await kindsOf(workflowId)).toEqual(['started', 'started', 'started']);
    expect(await rowOf(workflowId)).toMatchObject({
      status: 'MAX_RECOVERY_ATTEMPTS_EXCEEDED',
      active_deduplication_id: null,
      deduplication_id: key,
      attempts: 3,
      recovery_attempts: 3,
    });
    await expect(handle!.getResult()).rejects.toBeInstanceOf(WorkflowCancelledError);

    const replacement = await app.queues.enqueue('durable', tasks.poison, [key], { deduplicationId: key });
    expect(replacement.workflowId).not.toBe(workflowId);
    // While the replacement holds the key, the dead-lettered workflow cannot take it back.
    await expect(app.queues.resume(workflowId)).rejects.toMatchObject({
      name: 'QueueDeduplicatedError',
      existingWorkflowId: replacement.workflowId,
    });
    await expect(app.queues.cancel(replacement.workflowId)).resolves.toBe('CANCELLED');

    await pool.query(`DELETE FROM "${schema}".poison WHERE key = $1`, [key]);
    const resumed = await app.queues.resume<string>(workflowId);
    expect(await rowOf(workflowId)).toMatchObject({
      status: 'ENQUEUED',
      active_deduplication_id: key,
      recovery_attempts: 0,
    });
    spawnWorker('poison-worker');
    await expect(resumed.getResult({ timeoutMs: 20_000 })).resolves.toBe(`cured ${key}`);
    expect(await rowOf(workflowId)).toMatchObject({ status: 'SUCCESS', active_deduplication_id: null, attempts: 4 });
    expect(await kindsOf(workflowId)).toEqual(['started', 'started', 'started', 'started']);
    expect(await kindsOf(replacement.workflowId)).toEqual([]);
  });

  it('aborts a running body at its timeout: CANCELLED with WorkflowTimeoutError, the late return ignored, no step after', async () => {
    const key = 'timeout-running';
    await startWorker('timeout-worker');
    const handle = await app.queues.enqueue('serial', tasks.awaitAbort, [key], {
      deduplicationId: key,
      timeoutMs: 500,
    });
    await waitFor(async () => (await kindsOf(handle.workflowId)).includes('returning'), { what: 'the body to return' });

    expect(await kindsOf(handle.workflowId)).toEqual([
      'waiting',
      'aborted:WorkflowInterruptedError:timed-out',
      'step-refused:WorkflowInterruptedError',
      'returning',
    ]);
    // The key is free (this enqueue would throw otherwise), and the marker runs only once the body's slot is free.
    await serialMarker(`${key}-marker`, key);
    const row = await rowOf(handle.workflowId);
    expect(row).toMatchObject({ status: 'CANCELLED', output: null, active_deduplication_id: null });
    expect(row.error).toMatchObject({ name: 'WorkflowTimeoutError' });
    expect(row.completed_at.getTime() - row.started_at.getTime()).toBeGreaterThanOrEqual(500);
    expect(await sideEffectsOf(handle.workflowId)).toEqual([]);
    expect(
      (await pool.query(`SELECT count(*)::int AS n FROM "${schema}".steps WHERE workflow_id = $1`, [handle.workflowId]))
        .rows[0].n,
    ).toBe(0);
    await expect(handle.getResult()).rejects.toBeInstanceOf(WorkflowCancelledError);
  });

  it('reaches a body running in another process when QueueService.cancel() is called, and keeps it CANCELLED', async () => {
    const key = 'cancel-running';
    await startWorker('cancel-worker');
    const handle = await app.queues.enqueue('serial', tasks.awaitAbort, [key], { deduplicationId: key });
    await waitFor(async () => (await kindsOf(handle.workflowId)).includes('waiting'), { what: 'the body to wait' });

    await expect(app.queues.cancel(handle.workflowId)).resolves.toBe('CANCELLED');
    await waitFor(async () => (await kindsOf(handle.workflowId)).includes('returning'), { what: 'the body to return' });
    await serialMarker(`${key}-marker`);

    expect(await kindsOf(handle.workflowId)).toEqual([
      'waiting',
      'aborted:WorkflowInterruptedError:cancelled',
      'step-refused:WorkflowInterruptedError',
      'returning',
    ]);
    expect(await rowOf(handle.workflowId)).toMatchObject({
      status: 'CANCELLED',
      output: null,
      error: null,
      active_deduplication_id: null,
    });
    expect(await sideEffectsOf(handle.workflowId)).toEqual([]);
    await expect(handle.getResult()).rejects.toBeInstanceOf(WorkflowCancelledError);
  });

  it('cancels a workflow past its timeout after its process died, from a live peer, and frees its key', async () => {
    const key = 'timeout-dead';
    const workers = new Map<string, FixtureProcess>();
    await Promise.all(['tmo-x', 'tmo-y'].map(async (id) => workers.set(id, await startWorker(id))));
    const handle = await app.queues.enqueue('serial', tasks.awaitAbort, [key], {
      deduplicationId: key,
      timeoutMs: 800,
    });
    const [waiting] = await waitFor(
      async () => {
        const events = await eventsOf(handle.workflowId);
        return events.length > 0 && events;
      },
      { what: 'the body to start' },
    );
    expect(waiting.kind).toBe('waiting');
    const victim = workers.get(waiting.executor_id)!;
    const peer = [...workers.values()].find((worker) => worker !== victim)!;
    await sigkill(victim);

    // The peer's heartbeat cancels it at the deadline; had the peer recovered it through the lease first, it would
    // run it again and time it out itself (the deadline is kept across recoveries). Either way: CANCELLED, timed out.
    await waitForStatus(handle.workflowId, 'CANCELLED', 15_000);
    const row = await rowOf(handle.workflowId);
    expect(row).toMatchObject({ status: 'CANCELLED', output: null, active_deduplication_id: null });
    expect(row.error).toMatchObject({ name: 'WorkflowTimeoutError' });
    expect(row.completed_at.getTime()).toBeGreaterThanOrEqual(row.deadline_at.getTime());
    const fresh = await app.queues.enqueue('durable', tasks.record, [`${key}-fresh`], { deduplicationId: key });
    await expect(fresh.getResult({ timeoutMs: 15_000 })).resolves.toBe(`recorded ${key}-fresh`);
    expect(peer.hasEnded).toBe(false);
  });

  it('finishes, once, a workflow whose worker stalled (SIGSTOP) past its lease inside a transactional step', async () => {
    const key = 'stalled-step';
    const applicationName = `stalled-${schema}`;
    const stalled = await startWorker('stalled', { QUEUES: 'durable', APPLICATION_NAME: applicationName });
    // The peer only sweeps (it drains another queue), so the workflow surely runs on the worker about to stall.
    await startWorker('stalled-peer', { QUEUES: 'serial' });
    // A step of database work: 6 s of pg_sleep inside its transaction, which locks the workflow row meanwhile.
    const handle = await app.queues.enqueue('durable', tasks.longStep, [key, 6000], { deduplicationId: key });
    const stepSessions = async (state: string) =>
      (
        await pool.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity
           WHERE application_name = $1 AND query LIKE 'SELECT pg_sleep%' AND state = $2`,
          [applicationName, state],
        )
      ).rows[0].n;
    await waitFor(async () => (await stepSessions('active')) === 1, { what: "the step's query to run" });

    stalled.child.kill('SIGSTOP');
    try {
      // The peer expires the stalled worker's lease; its sweep skips the workflow, whose row the step's transaction
      // still locks, so the workflow stays PENDING under the stalled worker.
      await waitFor(async () => !(await executorIds()).includes('stalled'), {
        what: 'the peer to expire the stalled worker',
      });
      expect(await rowOf(handle.workflowId)).toMatchObject({
        status: 'PENDING',
        executor_id: 'stalled',
        recovery_attempts: 0,
      });
    } finally {
      stalled.child.kill('SIGCONT');
    }
    // Back to life, the worker finds its lease gone (which interrupts its workflows) and registers again, while its
    // step's query still runs; then the step, which still owns the workflow in its transaction, commits.
    await waitFor(async () => (await executorIds()).includes('stalled'), {
      what: 'the stalled worker to register again',
    });
    expect(await stepSessions('active')).toBe(1);
    await waitFor(async () => (await kindsOf(handle.workflowId)).includes('after-step'), {
      timeoutMs: 15_000,
      what: 'the body to go past the step',
    });

    // Whoever finishes it (the worker that owned it all along, or a recovery replaying the recorded step), it must end
    // SUCCESS, not stay PENDING under a live executor that no longer runs it, holding its key for good.
    const finished = await waitForStatus(handle.workflowId, 'SUCCESS', 10_000).then(
      () => true,
      () => false,
    );
    const sideEffects = await sideEffectsOf(handle.workflowId);
    expect(sideEffects).toHaveLength(1);
    const row = await rowOf(handle.workflowId);
    const liveExecutors = await executorIds();
    expect({
      finished,
      status: row.status,
      executor_id: row.executor_id,
      stuckPendingUnderLiveExecutor: row.status === 'PENDING' && liveExecutors.includes(row.executor_id),
      keyHeld: row.active_deduplication_id !== null,
    }).toEqual({
      finished: true,
      status: 'SUCCESS',
      executor_id: expect.any(String),
      stuckPendingUnderLiveExecutor: false,
      keyHeld: false,
    });
    expect(row.output).toEqual({ id: sideEffects[0].id, token: sideEffects[0].token });
  });

  it("keeps the other executors' leases alive while a transactional step outlives its workflow's deadline", async () => {
    const a = await startWorker('stall-a', { QUEUES: 'durable' });
    const b = await startWorker('stall-b', { QUEUES: 'serial' });
    const onA = await app.queues.enqueue('durable', tasks.hold, ['bystander-a']);
    const onB = await app.queues.enqueue('serial', tasks.hold, ['bystander-b']);
    await a.message('started', { key: 'bystander-a' });
    await b.message('started', { key: 'bystander-b' });

    // A transactional step of 3 s of database work (pg_sleep) in a workflow with a 300 ms timeout: the cancels at the
    // deadline wait for the step's commit (its transaction locks the workflow row); it ends CANCELLED once it commits.
    const long = await app.queues.enqueue('durable', tasks.longStep, ['past-deadline', 3000], { timeoutMs: 300 });
    await waitForStatus(long.workflowId, 'CANCELLED', 15_000);
    const longRow = await rowOf(long.workflowId);
    expect(longRow.error).toMatchObject({ name: 'WorkflowTimeoutError' });
    expect(await sideEffectsOf(long.workflowId)).toHaveLength(1);

    // Both executors were alive throughout: after two more heartbeats each, neither may have been declared dead.
    await waitFor(
      async () =>
        (
          await pool.query(
            `SELECT count(*)::int AS n FROM "${schema}".executors
             WHERE executor_id IN ('stall-a', 'stall-b') AND heartbeat_at > $1::timestamptz + interval '700 milliseconds'`,
            [longRow.completed_at],
          )
        ).rows[0].n === 2,
      { what: 'both executors to beat twice after the step committed' },
    );
    const bystanders = async () => ({
      a: { ...(await rowOf(onA.workflowId)), events: await kindsOf(onA.workflowId) },
      b: { ...(await rowOf(onB.workflowId)), events: await kindsOf(onB.workflowId) },
    });
    expect(await bystanders()).toMatchObject({
      a: { status: 'PENDING', executor_id: 'stall-a', recovery_attempts: 0, events: ['started'] },
      b: { status: 'PENDING', executor_id: 'stall-b', recovery_attempts: 0, events: ['started'] },
    });

    await release('bystander-a');
    await release('bystander-b');
    await expect(onA.getResult({ timeoutMs: 15_000 })).resolves.toBe('released bystander-a by stall-a');
    await expect(onB.getResult({ timeoutMs: 15_000 })).resolves.toBe('released bystander-b by stall-b');
  });

  it('on SIGTERM with a short grace leaves the running workflow PENDING, gives up the lease, and a peer finishes it once', async () => {
    const key = 'sigterm-grace';
    // NOTE: the body stops at once on the shutdown's signal; the grace only bounds the wait for it (and for its
    // 'interrupted' event's insert) on a loaded machine.
    const leaving = await startWorker('term-leaving', { SHUTDOWN_GRACE_MS: '2000' });
    const handle = await app.queues.enqueue('durable', tasks.hold, [key], { deduplicationId: key });
    await leaving.message('started', { key });
    // The peer's own lease is 60 s: it can only recover the workflow this fast because the leaving worker ended its
    // lease at once, not because the lease ran out.
    await startWorker('term-peer', { LEASE_MS: '60000', HEARTBEAT_MS: '300' });

    leaving.child.kill('SIGTERM');
    await leaving.message('sigterm');
    await expect(leaving.waitForExit()).resolves.toEqual({ code: 0, signal: null });
    const exitedAt = performance.now();

    // Its lease ended at once: its row is expired ('-infinity'), or already deleted by the peer's sweep.
    const { rows: live } = await pool.query(
      `SELECT executor_id FROM "${schema}".executors WHERE heartbeat_at > '-infinity' ORDER BY executor_id`,
    );
    expect(live.map((row: { executor_id: string }) => row.executor_id)).toEqual(['term-peer']);
    // Not finished by the leaving worker: still PENDING under it, or already taken back by the peer.
    expect(['PENDING', 'ENQUEUED']).toContain((await rowOf(handle.workflowId)).status);
    await waitFor(async () => (await eventsOf(handle.workflowId)).length >= 2, {
      what: "the leaving worker's 'interrupted' event",
    });
    // The peer may have taken the workflow back already (its events come after these two).
    expect((await eventsOf(handle.workflowId)).slice(0, 2)).toEqual([
      { kind: 'started', executor_id: 'term-leaving', attempt: 1 },
      { kind: 'interrupted:shutdown', executor_id: 'term-leaving', attempt: 1 },
    ]);

    await release(key);
    await waitForStatus(handle.workflowId, 'SUCCESS', 20_000);
    console.log(
      `[crash-recovery] SIGTERM handover: ${Math.round(performance.now() - exitedAt)} ms from the worker's exit to SUCCESS on the peer`,
    );
    expect(await rowOf(handle.workflowId)).toMatchObject({
      status: 'SUCCESS',
      output: `released ${key} by term-peer`,
      executor_id: 'term-peer',
      attempts: 2,
      recovery_attempts: 1,
      active_deduplication_id: null,
    });
    expect((await eventsOf(handle.workflowId)).slice(2)).toEqual([
      { kind: 'started', executor_id: 'term-peer', attempt: 2 },
      { kind: 'finished', executor_id: 'term-peer', attempt: 2 },
    ]);
  });
});
