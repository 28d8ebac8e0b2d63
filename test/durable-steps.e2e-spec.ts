import {
  DedupQueueError,
  InvalidArgumentError,
  QueueDeduplicatedError,
  WorkflowCancelledError,
  WorkflowFailedError,
  WorkflowResultTimeoutError,
  runStep,
  stepManager,
  workflowContext,
} from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';
import { DurableTasks } from './fixtures/durable-tasks';

describe('durable steps, retries, timeouts and cancellation (one process)', () => {
  const schema = uniqueSchema('durable');
  let app: QueueApp;
  let tasks: DurableTasks;
  let pool: Pool;

  const row = async (workflowId: string) =>
    (await pool.query(`SELECT * FROM "${schema}".workflows WHERE workflow_id = $1`, [workflowId])).rows[0];
  const steps = async (workflowId: string) =>
    (
      await pool.query(
        `SELECT step_index, step_name, output::text AS output, error FROM "${schema}".steps WHERE workflow_id = $1 ORDER BY step_index`,
        [workflowId],
      )
    ).rows;

  beforeAll(async () => {
    pool = testPool();
    app = await startQueueApp(
      { schema, queues: [{ name: 'tasks', workerConcurrency: 20 }], heartbeatIntervalMs: 200 },
      [DurableTasks],
    );
    tasks = app.get(DurableTasks);
    await pool.query(`CREATE TABLE "${schema}".side_effects (id serial PRIMARY KEY, value text NOT NULL)`);
  });

  afterAll(async () => {
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('retries a failed workflow, keeping its key meanwhile, and replays the steps that completed', async () => {
    const handle = await app.queues.enqueue('tasks', tasks.retried, ['retry', 2], { deduplicationId: 'retry-key' });
    await waitFor(async () => (await row(handle.workflowId)).failed_attempts === 1, { what: 'the first failure' });
    await expect(
      app.queues.enqueue('tasks', tasks.retried, ['retry', 0], { deduplicationId: 'retry-key' }),
    ).rejects.toBeInstanceOf(QueueDeduplicatedError);
    const result = await handle.getResult();
    expect(result.attempt).toBe(3);
    expect(tasks.stepRuns.get('token:retry')).toBe(1);
    const [recorded] = await steps(handle.workflowId);
    expect(JSON.parse(recorded.output)).toBe(result.token);
    expect(await row(handle.workflowId)).toMatchObject({
      status: 'SUCCESS',
      failed_attempts: 2,
      attempts: 3,
      active_deduplication_id: null,
    });
  });

  it('ends as ERROR once maxAttempts are used up, and frees the key', async () => {
    const handle = await app.queues.enqueue('tasks', tasks.retried, ['exhausted', 5], { deduplicationId: 'exhausted' });
    const error: WorkflowFailedError = await handle.getResult().catch((caught) => caught);
    expect(error).toBeInstanceOf(WorkflowFailedError);
    expect(error.message).toContain('attempt 3 of exhausted failed');
    expect(await row(handle.workflowId)).toMatchObject({
      status: 'ERROR',
      failed_attempts: 3,
      active_deduplication_id: null,
    });
  });

  it('dead-letters (parks) a workflow whose steps no longer match the recorded ones, without retrying it', async () => {
    const handle = await app.queues.enqueue('tasks', tasks.changesItsSteps, ['changing']);
    const status = await waitFor(
      async () => {
        const current = await handle.getStatus();
        return current.status === 'MAX_RECOVERY_ATTEMPTS_EXCEEDED' ? current : undefined;
      },
      { what: 'the workflow to be parked' },
    );
    expect(status.error?.name).toBe('WorkflowDeterminismError');
    expect(status.error?.message).toMatch(
      /called step "a-different-step" as step #0, but "DurableTasks.token" was recorded/,
    );
    expect(status.attempts).toBe(2);
    // A parked run is meant to go on once fixed and resumed: getResult() waits for it.
    await expect(handle.getResult({ timeoutMs: 300 })).rejects.toBeInstanceOf(WorkflowResultTimeoutError);
  });

  it('retries a step with backoff, and records the error of a step that keeps failing', async () => {
    await expect((await app.queues.enqueue('tasks', tasks.withFlakyStep, ['twice', 2])).getResult()).resolves.toBe(
      'flaky twice ok',
    );
    expect(tasks.stepRuns.get('flaky:twice')).toBe(3);
    const failing = await app.queues.enqueue('tasks', tasks.withFlakyStep, ['always', 10]);
    await expect(failing.getResult()).rejects.toThrow(/flaky always failed/);
    expect(tasks.stepRuns.get('flaky:always')).toBe(3);
    expect(await steps(failing.workflowId)).toEqual([
      {
        step_index: 0,
        step_name: 'DurableTasks.flaky',
        output: null,
        error: expect.objectContaining({ message: 'flaky always failed' }),
      },
    ]);
  });

  it('runs nested steps inside their parent step and supports the functional form', async () => {
    const handle = await app.queues.enqueue('tasks', tasks.nestedAndFunctional, ['fn']);
    await expect(handle.getResult()).resolves.toEqual(['outer(fn)', 'fn-plain']);
    expect((await steps(handle.workflowId)).map((step) => step.step_name)).toEqual(['outer', 'plain']);
  });

  it('commits a transactional step and its checkpoint together', async () => {
    const handle = await app.queues.enqueue('tasks', tasks.writesTransactionally, [
      `"${schema}".side_effects`,
      'tx-once',
      false,
    ]);
    const id = await handle.getResult();
    const written = (await pool.query(`SELECT id FROM "${schema}".side_effects WHERE value = 'tx-once'`)).rows;
    expect(written).toEqual([{ id }]);
    expect(JSON.parse((await steps(handle.workflowId))[0].output)).toBe(id);
  });

  it('times out a running workflow: CANCELLED with WorkflowTimeoutError, key freed, body told, no further step', async () => {
    const handle = await app.queues.enqueue('tasks', tasks.waitsForAbort, ['timeout'], {
      deduplicationId: 'slow',
      timeoutMs: 150,
    });
    await expect(handle.getResult()).rejects.toBeInstanceOf(WorkflowCancelledError);
    expect(await row(handle.workflowId)).toMatchObject({
      status: 'CANCELLED',
      active_deduplication_id: null,
      error: { name: 'WorkflowTimeoutError', message: 'Workflow timed out after 150 ms' },
    });
    await waitFor(() => tasks.observed.filter((o) => o.workflowId === handle.workflowId).length === 2, {
      what: 'the body to react',
    });
    expect(tasks.observed.filter((o) => o.workflowId === handle.workflowId).map((o) => o.event)).toEqual([
      'aborted:WorkflowInterruptedError:timed-out',
      'step refused:WorkflowInterruptedError',
    ]);
    expect(tasks.stepRuns.get('token:after-abort-timeout')).toBeUndefined();
    // Outcomes are written in order: once a later workflow's result is in, the late return was attempted too.
    await (await app.queues.enqueue('tasks', tasks.nestedAndFunctional, ['barrier'])).getResult();
    expect((await row(handle.workflowId)).status).toBe('CANCELLED');
  });

  it('reaches a running body through its signal when the workflow is cancelled', async () => {
    const handle = await app.queues.enqueue('tasks', tasks.waitsForAbort, ['cancel']);
    await waitFor(async () => (await row(handle.workflowId)).status === 'PENDING', { what: 'PENDING' });
    await app.queues.cancel(handle.workflowId);
    await waitFor(() => tasks.observed.some((o) => o.workflowId === handle.workflowId), {
      what: 'the body to see the abort',
    });
    expect(tasks.observed.find((o) => o.workflowId === handle.workflowId)?.event).toBe(
      'aborted:WorkflowInterruptedError:cancelled',
    );
  });

  it('resumes a cancelled workflow, unless its key was taken meanwhile or it already succeeded', async () => {
    const cancelled = await app.queues.enqueue('tasks', tasks.waitsForAbort, ['resume'], {
      deduplicationId: 'resume-key',
      workflowId: 'to-resume',
    });
    await waitFor(async () => (await row('to-resume')).status === 'PENDING', { what: 'PENDING' });
    await app.queues.cancel('to-resume');
    const taker = await app.queues.enqueue('tasks', tasks.waitsForAbort, ['taker'], { deduplicationId: 'resume-key' });
    await expect(app.queues.resume('to-resume')).rejects.toMatchObject({
      name: 'QueueDeduplicatedError',
      existingWorkflowId: taker.workflowId,
    });
    await app.queues.cancel(taker.workflowId);

    const resumed = await app.queues.resume<string>('to-resume');
    await waitFor(async () => (await row('to-resume')).status === 'PENDING', { what: 'the resumed run' });
    expect((await row('to-resume')).active_deduplication_id).toBe('resume-key');
    tasks.release('resume');
    await expect(resumed.getResult()).resolves.toBe('late result');
    await expect(app.queues.resume(cancelled.workflowId)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(app.queues.resume('no-such')).rejects.toMatchObject({ name: 'WorkflowNotFoundError' });
  });

  it('refuses a bad timeout and context calls outside a workflow', async () => {
    await expect(app.queues.enqueue('tasks', tasks.retried, ['x', 0], { timeoutMs: 0 })).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    expect(() => workflowContext()).toThrow(DedupQueueError);
    expect(() => stepManager()).toThrow(/only available inside a step declared with \{ transactional: true \}/);
    await expect(runStep('outside', () => 42)).resolves.toBe(42);
    await expect(tasks.token('outside')).resolves.toMatch(/^outside-/);
  });
});
