import { useWaitingSuite } from './fixtures/waiting-suite';
import { waitFor } from './support/wait-for';

/**
 * What a workflow does with other workflows is recorded at its position, with real worker processes
 * (child-waiting-worker.ts): `send` from a body (exactly once, with or without an idempotency key), `getEvent` from a
 * body (what it returned, and its deadline, durable across a SIGKILL; WAITING meanwhile, holding its key but no
 * slot), a child's deadline inherited from its parent, and `cancel` with `cancelChildren` reaching every unfinished
 * descendant whatever its state, to any depth.
 */
describe('the whole record', () => {
  const suite = useWaitingSuite('record');
  const { schema, startWorker, waitForStatus, eventsOf } = suite;
  const pool = () => suite.pool();
  const app = () => suite.app();
  const tasks = () => suite.tasks();

  const stepsOf = async (workflowId: string) =>
    (
      await pool().query<{ step_index: number; step_name: string; output: unknown }>(
        `SELECT step_index, step_name, output FROM "${schema}".steps WHERE workflow_id = $1 ORDER BY step_index`,
        [workflowId],
      )
    ).rows;

  const rowOf = async (workflowId: string) =>
    (
      await pool().query(
        `SELECT status, deadline_at, not_before, executor_id, error FROM "${schema}".workflows WHERE workflow_id = $1`,
        [workflowId],
      )
    ).rows[0];

  /** A finished workflow of `inbox`, to send messages to (a workflow in any status takes them). */
  const finishedTarget = async () => {
    const target = await app().queues.enqueue('inbox', tasks().receive, [null, 0, 0]);
    await target.getResult({ timeoutMs: 15_000 });
    return target.workflowId;
  };

  const mailOf = async (workflowId: string) =>
    (
      await pool().query(
        `SELECT message FROM "${schema}".workflow_messages WHERE workflow_id = $1 AND topic = 'mail' ORDER BY seq`,
        [workflowId],
      )
    ).rows.map((row) => row.message);

  describe('send from a workflow body', () => {
    it('is recorded at its position: a retried attempt sends nothing again (no idempotency key)', async () => {
      await startWorker('record-send-retry');
      const target = await finishedTarget();
      const sender = await app().queues.enqueue('inbox', tasks().sendAndNap, [target, 'once', 0, true]);
      await expect(sender.getResult({ timeoutMs: 15_000 })).resolves.toBeUndefined();
      expect((await sender.getStatus()).attempts).toBe(2);
      expect(await eventsOf(sender.workflowId)).toEqual([
        { kind: 'sent', data: null },
        { kind: 'sent', data: null },
      ]);
      expect(await mailOf(target)).toEqual(['once']);
      expect(await stepsOf(sender.workflowId)).toEqual([{ step_index: 0, step_name: 'send', output: null }]);
    });

    it('sends nothing again when the body runs again after a suspension, or after a SIGKILL', async () => {
      const first = await startWorker('record-send-killed');
      const target = await finishedTarget();
      const sender = await app().queues.enqueue('inbox', tasks().sendAndNap, [target, 'napped', 3000, false]);
      await waitForStatus(sender, 'WAITING');
      first.child.kill('SIGKILL');
      await first.ended;
      await startWorker('record-send-restarted');
      await expect(sender.getResult({ timeoutMs: 15_000 })).resolves.toBeUndefined();
      expect((await eventsOf(sender.workflowId)).map((event) => event.kind)).toEqual(['sent', 'sent']);
      expect(await mailOf(target)).toEqual(['napped']);
    });

    it('records a refusal: re-executed, it throws the same error without looking again', async () => {
      await startWorker('record-send-refused');
      const sender = await app().queues.enqueue('inbox', tasks().sendAndNap, ['no-such-workflow', 'x', 0, false]);
      await expect(sender.getResult({ timeoutMs: 15_000 })).rejects.toMatchObject({
        recordedError: expect.objectContaining({ name: 'WorkflowNotFoundError' }),
      });
      expect(await stepsOf(sender.workflowId)).toEqual([{ step_index: 0, step_name: 'send', output: null }]);
    });
  });

  describe('getEvent from a workflow body', () => {
    it('records what it returned: re-executed, it returns the same though the value changed since', async () => {
      await startWorker('record-get-replay');
      const publisher = await app().queues.enqueue('inbox', tasks().publish, ['k', [1, 2]]);
      await app().queues.send(publisher.workflowId, 'go', { topic: 'next' });
      await expect(app().queues.getEvent(publisher.workflowId, 'k', { timeoutMs: 10_000 })).resolves.toBe(1);
      const reader = await app().queues.enqueue('naps', tasks().readEvent, [publisher.workflowId, 'k', 10_000, 1500]);
      await waitForStatus(reader, 'WAITING');
      await app().queues.send(publisher.workflowId, 'go', { topic: 'next' });
      await publisher.getResult({ timeoutMs: 15_000 });
      await expect(app().queues.getEvent(publisher.workflowId, 'k', { timeoutMs: 0 })).resolves.toBe(2);

      await expect(reader.getResult({ timeoutMs: 15_000 })).resolves.toBe(1);
      expect((await eventsOf(reader.workflowId)).filter((event) => event.kind === 'read')).toEqual([
        { kind: 'read', data: 1 },
        { kind: 'read', data: 1 },
      ]);
      expect((await stepsOf(reader.workflowId)).slice(0, 2)).toEqual([
        { step_index: 0, step_name: 'getEvent deadline', output: expect.any(String) },
        { step_index: 1, step_name: 'getEvent k', output: 1 },
      ]);
    });

    it('waits suspended (key kept, no slot), and the setEvent wakes it at once', async () => {
      await startWorker('record-get-suspended');
      const publisher = await app().queues.enqueue('inbox', tasks().publish, ['ready', ['yes']]);
      const reader = await app().queues.enqueue('naps', tasks().readEvent, [publisher.workflowId, 'ready', 60_000, 0], {
        deduplicationId: 'the-reader',
      });
      await waitForStatus(reader, 'WAITING');
      const waiting = await reader.getStatus();
      expect(waiting).toMatchObject({ status: 'WAITING', executorId: null, attempts: 1 });
      expect(waiting.notBefore).toBeInstanceOf(Date);
      expect(waiting.notBefore!.getTime()).toBeGreaterThan(Date.now() + 50_000);
      // It holds its key, but no slot of the concurrency-1 queue: another workflow of the queue runs meanwhile.
      await expect(
        app().queues.enqueue('naps', tasks().quick, ['dup'], { deduplicationId: 'the-reader' }),
      ).rejects.toMatchObject({ name: 'QueueDeduplicatedError', existingWorkflowId: reader.workflowId });
      await expect((await app().queues.enqueue('naps', tasks().quick, ['meanwhile'])).getResult()).resolves.toBe(
        'meanwhile',
      );

      const sentAt = Date.now();
      await app().queues.send(publisher.workflowId, 'go', { topic: 'next' });
      await expect(reader.getResult({ timeoutMs: 15_000 })).resolves.toBe('yes');
      expect(Date.now() - sentAt).toBeLessThan(5000);
      expect((await reader.getStatus()).attempts).toBe(2);
      const { rows } = await pool().query(`SELECT count(*)::int AS n FROM "${schema}".event_waits`);
      expect(rows[0].n).toBe(0);
    });

    it('times out durably: a worker SIGKILLed while it waits leaves it to wake at the recorded deadline', async () => {
      const first = await startWorker('record-get-killed');
      const publisher = await app().queues.enqueue('inbox', tasks().publish, ['never', ['x']]);
      const reader = await app().queues.enqueue('naps', tasks().readEvent, [publisher.workflowId, 'never', 3000, 0]);
      await waitForStatus(reader, 'WAITING');
      first.child.kill('SIGKILL');
      await first.ended;
      await startWorker('record-get-restarted');
      await expect(reader.getResult({ timeoutMs: 15_000 })).resolves.toBeNull();

      const [deadline, outcome] = await stepsOf(reader.workflowId);
      expect(deadline).toMatchObject({ step_name: 'getEvent deadline' });
      expect(outcome).toEqual({ step_index: 1, step_name: 'getEvent never', output: null });
      const { completedAt } = await reader.getStatus();
      const recordedDeadline = Date.parse(deadline.output as string);
      expect(completedAt!.getTime()).toBeGreaterThanOrEqual(recordedDeadline - 50);
      expect(completedAt!.getTime()).toBeLessThan(recordedDeadline + 2000);
    });

    it('reports a wait without a timeout with notBefore null (recv and getEvent alike)', async () => {
      await startWorker('record-no-timeout');
      const publisher = await app().queues.enqueue('inbox', tasks().publish, ['forever', ['x']]);
      const reader = await app().queues.enqueue('naps', tasks().readEvent, [publisher.workflowId, 'forever', null, 0]);
      const receiver = await app().queues.enqueue('inbox', tasks().receive, ['forever', 1, null]);
      await waitForStatus(reader, 'WAITING');
      await waitForStatus(receiver, 'WAITING');
      for (const handle of [reader, receiver]) {
        expect(await handle.getStatus()).toMatchObject({ status: 'WAITING', notBefore: null });
        expect((await rowOf(handle.workflowId)).not_before).toBeNull();
      }
      const listed = await app().queues.list({ status: 'WAITING', limit: 1000 });
      expect(listed.filter((status) => status.notBefore !== null && !(status.notBefore instanceof Date))).toEqual([]);
      await app().queues.cancel(reader.workflowId);
      await app().queues.cancel(receiver.workflowId);
      await app().queues.cancel(publisher.workflowId);
    });
  });

  it('gives a child its parent deadline unless it has a timeout of its own (null: none)', async () => {
    await startWorker('record-deadline');
    const parent = await app().queues.enqueue('inbox', tasks().parentWithDeadline, [], { timeoutMs: 4000 });
    const spawned = await waitFor(
      async () => (await eventsOf(parent.workflowId)).find((event) => event.kind === 'spawned')?.data as string[],
      { what: 'the children to be enqueued' },
    );
    const [inheriting, own, detached] = spawned;
    const parentDeadline = (await rowOf(parent.workflowId)).deadline_at as Date;
    expect(parentDeadline).toBeInstanceOf(Date);
    await waitFor(
      async () => {
        const rows = await Promise.all(spawned.map(rowOf));
        return rows.every((row) => row.status === 'WAITING') && rows;
      },
      { what: 'the children to nap' },
    );
    expect((await rowOf(inheriting)).deadline_at).toEqual(parentDeadline);
    expect((await rowOf(own)).deadline_at.getTime()).toBeGreaterThan(Date.now() + 7_000_000);
    expect((await rowOf(detached)).deadline_at).toBeNull();

    // The parent's timeout ends it and the child that inherited its deadline; the others nap on.
    await expect(parent.getResult({ timeoutMs: 15_000 })).rejects.toMatchObject({ name: 'WorkflowCancelledError' });
    await waitFor(async () => (await rowOf(inheriting)).status === 'CANCELLED', { what: 'the inheriting child' });
    expect((await rowOf(inheriting)).error).toMatchObject({ name: 'WorkflowTimeoutError' });
    expect((await rowOf(own)).status).toBe('WAITING');
    expect((await rowOf(detached)).status).toBe('WAITING');
    await app().queues.cancel(own);
    await app().queues.cancel(detached);
  });

  it('cancels every unfinished descendant with cancelChildren, whatever its state, in one call', async () => {
    await startWorker('record-tree');
    const root = await app().queues.enqueue('inbox', tasks().tree, []);
    const [delayed, waiting, running, finished] = await waitFor(
      async () => (await eventsOf(root.workflowId)).find((event) => event.kind === 'spawned')?.data as string[],
      { what: 'the children to be enqueued' },
    );
    const [leaf] = await waitFor(
      async () => (await eventsOf(finished)).find((event) => event.kind === 'spawned')?.data as string[],
      { what: 'the grandchild to be enqueued' },
    );
    await waitForStatus(root, 'WAITING');
    await waitFor(
      async () =>
        (await rowOf(waiting)).status === 'WAITING' &&
        (await rowOf(running)).status === 'PENDING' &&
        (await rowOf(finished)).status === 'SUCCESS' &&
        (await rowOf(leaf)).status === 'WAITING',
      { what: 'every descendant in its state' },
    );
    // A dead letter below the waiting child (as recovery leaves one: no key, waiting for resume).
    await pool().query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, attempts,
         recovery_attempts, parent_workflow_id)
       VALUES ('dead-letter', 'inbox', 'WaitingTasks.quick', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED', '["x"]', 3, 3, $1)`,
      [waiting],
    );
    expect(
      (await app().queues.list({ parentWorkflowId: root.workflowId })).map((child) => child.workflowId).sort(),
    ).toEqual([delayed, waiting, running, finished].sort());

    await expect(app().queues.cancel(root.workflowId, { cancelChildren: true })).resolves.toBe('CANCELLED');
    for (const workflowId of [delayed, waiting, running, leaf, 'dead-letter']) {
      expect({ workflowId, status: (await rowOf(workflowId)).status }).toEqual({ workflowId, status: 'CANCELLED' });
    }
    expect((await rowOf(finished)).status).toBe('SUCCESS');
    await waitFor(async () => (await eventsOf(running)).some((event) => event.kind === 'aborted'), {
      what: 'the running child to see its signal abort',
    });
  });

  it('cancels a tree of 10,000 descendants in one call', async () => {
    // Built in SQL (no worker runs it): a root, 100 children (half finished, in the history), 99 grandchildren each
    // (ENQUEUED for an hour from now, WAITING, or dead letters).
    await pool().query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, not_before)
       VALUES ('big-root', 'inbox', 'WaitingTasks.tree', 'WAITING', '[]', NULL)`,
    );
    await pool().query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, not_before,
         parent_workflow_id)
       SELECT 'big-c' || c, 'inbox', 'WaitingTasks.branch', 'ENQUEUED', '[]', now() + interval '1 hour', 'big-root'
       FROM generate_series(1, 50) AS c`,
    );
    await pool().query(
      `INSERT INTO "${schema}".workflow_history (workflow_id, queue_name, workflow_name, status, inputs, attempts,
         completed_at, parent_workflow_id)
       SELECT 'big-c' || c, 'inbox', 'WaitingTasks.branch', 'SUCCESS', '[]', 1, now(), 'big-root'
       FROM generate_series(51, 100) AS c`,
    );
    await pool().query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, not_before,
         parent_workflow_id)
       SELECT 'big-g' || c || '-' || g, CASE WHEN g % 2 = 0 THEN 'naps' ELSE 'inbox' END, 'WaitingTasks.quick',
              (ARRAY['ENQUEUED', 'WAITING', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'])[1 + g % 3], '["g"]',
              now() + interval '1 hour', 'big-c' || c
       FROM generate_series(1, 100) AS c, generate_series(1, 99) AS g`,
    );
    const startedAt = performance.now();
    await expect(app().queues.cancel('big-root', { cancelChildren: true })).resolves.toBe('CANCELLED');
    const elapsedMs = performance.now() - startedAt;
    const { rows } = await pool().query(
      `SELECT status, count(*)::int AS n FROM "${schema}".workflows WHERE workflow_id LIKE 'big-%' GROUP BY status
       ORDER BY status`,
    );
    expect(rows).toEqual([
      { status: 'CANCELLED', n: 1 + 50 + 9900 },
      { status: 'SUCCESS', n: 50 },
    ]);
    process.stdout.write(
      `[the-whole-record] cancel with 10,000 descendants (3 levels, 2 queues): ${Math.round(elapsedMs)} ms\n`,
    );
  });
});
