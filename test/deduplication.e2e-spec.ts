import {
  QueueDeduplicatedError,
  WorkflowCancelledError,
  WorkflowFailedError,
  WorkflowIdConflictError,
  WorkflowNotFoundError,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { RecordingTasks } from './fixtures/recording-tasks';
import { waitFor } from './support/wait-for';
import { moveWorkflowRow } from './support/workflow-rows';
import { activeTableLockWaits } from './support/lock-waits';

describe('deduplication contract', () => {
  const schema = uniqueSchema('dedup');
  let app: QueueApp;
  let tasks: RecordingTasks;
  let pool: Pool;

  beforeAll(async () => {
    pool = testPool();
    app = await startQueueApp({ schema, queues: [{ name: 'tasks', workerConcurrency: 20 }, { name: 'other' }] }, [
      RecordingTasks,
    ]);
    tasks = app.get(RecordingTasks);
  });

  afterAll(async () => {
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  const rowsFor = async (deduplicationId: string) =>
    (
      await pool.query(
        `SELECT workflow_id, queue_name, status FROM "${schema}".workflows WHERE deduplication_id = $1 ORDER BY seq`,
        [deduplicationId],
      )
    ).rows;

  it('rejects a second enqueue while the first is ENQUEUED or PENDING, naming the holder, and writes nothing', async () => {
    const first = await app.queues.enqueue('tasks', tasks.blocked, ['k1'], { deduplicationId: 'user-1' });
    const error = await app.queues
      .enqueue('tasks', tasks.blocked, ['k1-again'], { deduplicationId: 'user-1' })
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(QueueDeduplicatedError);
    expect(error).toMatchObject({
      name: 'QueueDeduplicatedError',
      queueName: 'tasks',
      deduplicationId: 'user-1',
      existingWorkflowId: first.workflowId,
    });
    expect(await rowsFor('user-1')).toEqual([
      { workflow_id: first.workflowId, queue_name: 'tasks', status: expect.any(String) },
    ]);

    tasks.gate('k1').open();
    await expect(first.getResult()).resolves.toBe('done k1');
  });

  it('frees the ID once the holder ends with SUCCESS, ERROR or CANCELLED', async () => {
    const succeeded = await app.queues.enqueue('tasks', tasks.echo, ['a'], { deduplicationId: 'free-1' });
    await succeeded.getResult();
    const next = await app.queues.enqueue('tasks', tasks.fail, ['boom'], { deduplicationId: 'free-1' });
    await expect(next.getResult()).rejects.toBeInstanceOf(WorkflowFailedError);
    const afterError = await app.queues.enqueue('tasks', tasks.blocked, ['free-1-gate'], { deduplicationId: 'free-1' });
    await expect(app.queues.cancel(afterError.workflowId)).resolves.toBe('CANCELLED');
    await expect(afterError.getResult()).rejects.toBeInstanceOf(WorkflowCancelledError);
    const afterCancel = await app.queues.enqueue('tasks', tasks.echo, ['b'], { deduplicationId: 'free-1' });
    await expect(afterCancel.getResult()).resolves.toBe('b');
    tasks.gate('free-1-gate').open();

    expect((await rowsFor('free-1')).map((row) => row.status)).toEqual(['SUCCESS', 'ERROR', 'CANCELLED', 'SUCCESS']);
  });

  it('scopes IDs per queue', async () => {
    const inTasks = await app.queues.enqueue('tasks', tasks.blocked, ['scope'], { deduplicationId: 'scoped' });
    const inOther = await app.queues.enqueue('other', tasks.blocked, ['scope'], { deduplicationId: 'scoped' });
    expect(inOther.workflowId).not.toBe(inTasks.workflowId);
    await expect(app.queues.enqueue('other', tasks.echo, [1], { deduplicationId: 'scoped' })).rejects.toMatchObject({
      existingWorkflowId: inOther.workflowId,
      queueName: 'other',
    });
    tasks.gate('scope').open();
    await Promise.all([inTasks.getResult(), inOther.getResult()]);
  });

  it('does not deduplicate without an ID', async () => {
    const handles = await Promise.all([1, 2, 3].map((n) => app.queues.enqueue('tasks', tasks.echo, [n])));
    expect(new Set(handles.map((handle) => handle.workflowId)).size).toBe(3);
    await expect(Promise.all(handles.map((handle) => handle.getResult()))).resolves.toEqual([1, 2, 3]);
  });

  it('creates exactly one workflow from 50 concurrent enqueues with one ID', async () => {
    const attempts = await Promise.allSettled(
      Array.from({ length: 50 }, (_, n) =>
        app.queues.enqueue('tasks', tasks.blocked, ['burst'], { deduplicationId: 'burst', workflowId: `burst-${n}` }),
      ),
    );
    const created = attempts.filter((attempt) => attempt.status === 'fulfilled');
    const rejected = attempts.filter((attempt): attempt is PromiseRejectedResult => attempt.status === 'rejected');
    expect(created).toHaveLength(1);
    const holder = (created[0] as PromiseFulfilledResult<{ workflowId: string }>).value.workflowId;
    expect(rejected).toHaveLength(49);
    for (const { reason } of rejected) {
      expect(reason).toBeInstanceOf(QueueDeduplicatedError);
      expect(reason.existingWorkflowId).toBe(holder);
    }
    expect(await rowsFor('burst')).toHaveLength(1);
    tasks.gate('burst').open();
  });

  it('treats the same workflowId twice as one workflow whose body runs once', async () => {
    const before = tasks.calls.filter((call) => call.args[0] === 'idempotent').length;
    const first = await app.queues.enqueue('tasks', tasks.echo, ['idempotent'], {
      workflowId: 'wf-idem',
      deduplicationId: 'idem',
    });
    const second = await app.queues.enqueue('tasks', tasks.echo, ['idempotent'], {
      workflowId: 'wf-idem',
      deduplicationId: 'idem',
    });
    expect(second.workflowId).toBe(first.workflowId);
    await expect(second.getResult()).resolves.toBe('idempotent');
    const third = await app.queues.enqueue('tasks', tasks.echo, ['other args'], { workflowId: 'wf-idem' });
    await expect(third.getResult()).resolves.toBe('idempotent');
    expect(tasks.calls.filter((call) => call.args[0] === 'idempotent').length - before).toBe(1);
    await expect(app.queues.enqueue('other', tasks.echo, ['x'], { workflowId: 'wf-idem' })).rejects.toBeInstanceOf(
      WorkflowIdConflictError,
    );
  });

  it('answers with the finished workflow when a workflowId is enqueued again while that workflow finishes', async () => {
    const first = await app.queues.enqueue('tasks', tasks.echo, ['finishing'], {
      workflowId: 'wf-finishing',
      delayMs: 60_000,
    });
    // The statement that ends a workflow moves its row to the history; the test does so by hand and holds the
    // transaction open, so that the second enqueue waits on the row and runs on once the move commits.
    const finisher = await pool.connect();
    try {
      await finisher.query('BEGIN');
      await finisher.query(
        `UPDATE "${schema}".workflow_queue SET status = 'SUCCESS', output = '"finished"', completed_at = now()
         WHERE workflow_id = $1`,
        [first.workflowId],
      );
      await moveWorkflowRow(finisher, schema, first.workflowId, 'workflow_queue', 'workflow_history');
      const again = app.queues.enqueue('tasks', tasks.echo, ['finishing'], { workflowId: 'wf-finishing' });
      await waitFor(async () => (await activeTableLockWaits(pool, schema)) === 1, {
        what: 'the second enqueue to wait on the finishing row',
      });
      await finisher.query('COMMIT');
      const second = await again;
      expect(second.workflowId).toBe(first.workflowId);
      await expect(second.getResult()).resolves.toBe('finished');
    } finally {
      await finisher.query('ROLLBACK').catch(() => undefined);
      finisher.release();
    }
    const rows = await pool.query(
      `SELECT 'active' AS at FROM "${schema}".workflow_queue WHERE workflow_id = $1
       UNION ALL SELECT 'history' FROM "${schema}".workflow_history WHERE workflow_id = $1`,
      [first.workflowId],
    );
    expect(rows.rows).toEqual([{ at: 'history' }]);
  });

  it('round-trips arguments and results as JSON', async () => {
    const value = { text: 'héllo', n: 1.5, list: [1, null, 'x'], nested: { ok: true }, when: new Date(0) };
    const handle = await app.queues.enqueue('tasks', tasks.echo, [value]);
    await expect(handle.getResult()).resolves.toEqual({ ...value, when: '1970-01-01T00:00:00.000Z' });
    await expect((await app.queues.enqueue('tasks', tasks.nothing, [])).getResult()).resolves.toBeUndefined();
    await expect((await app.queues.enqueue('tasks', tasks.echo, [null])).getResult()).resolves.toBeNull();
  });

  it('reports status, failure details and results through handles', async () => {
    const failed = await app.queues.enqueue('tasks', tasks.fail, ['bad input'], { deduplicationId: 'fails' });
    const error: WorkflowFailedError = await failed.getResult().catch((caught) => caught);
    expect(error).toBeInstanceOf(WorkflowFailedError);
    expect(error.message).toContain('bad input');
    expect(error.causeName).toBe('TypeError');
    const status = await failed.getStatus();
    expect(status).toMatchObject({
      workflowId: failed.workflowId,
      status: 'ERROR',
      queueName: 'tasks',
      workflowName: 'RecordingTasks.fail',
      deduplicationId: 'fails',
      attempts: 1,
      error: { name: 'TypeError', message: 'bad input' },
    });
    expect(status.completedAt).toBeInstanceOf(Date);

    const retrieved = await app.queues.retrieve<string>(failed.workflowId);
    await expect(retrieved.getStatus()).resolves.toMatchObject({ status: 'ERROR' });
    await expect(app.queues.retrieve('no-such-workflow')).rejects.toBeInstanceOf(WorkflowNotFoundError);
    await expect(app.queues.cancel('no-such-workflow')).rejects.toBeInstanceOf(WorkflowNotFoundError);
    await expect(app.queues.cancel(failed.workflowId)).resolves.toBe('ERROR');

    const listed = await app.queues.list({ queueName: 'tasks', deduplicationId: 'fails' });
    expect(listed.map((info) => info.workflowId)).toEqual([failed.workflowId]);
  });

  it('cancels an ENQUEUED workflow before it runs and a PENDING one without recording its late result', async () => {
    const running = await app.queues.enqueue('tasks', tasks.blocked, ['cancel-running'], {
      deduplicationId: 'cancel-me',
    });
    await waitFor(async () => (await running.getStatus()).status === 'PENDING', { what: 'PENDING' });
    await app.queues.cancel(running.workflowId);
    const replacement = await app.queues.enqueue('tasks', tasks.echo, ['replacement'], {
      deduplicationId: 'cancel-me',
    });
    await expect(replacement.getResult()).resolves.toBe('replacement');
    tasks.gate('cancel-running').open();
    await waitFor(() => tasks.running === 0, { what: 'the cancelled body to return' });
    // Outcomes are written in order, so once a later workflow's result is in, the late one was attempted too.
    await (await app.queues.enqueue('tasks', tasks.echo, ['barrier'])).getResult();
    await expect(running.getStatus()).resolves.toMatchObject({ status: 'CANCELLED' });
  });
});
