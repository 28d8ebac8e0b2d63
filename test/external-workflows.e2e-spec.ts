/**
 * Enqueue without the code: a producer lists workflows it does not have in `forRoot({ externalWorkflows })` and
 * enqueues them by name; the worker that has the class applies its own `@Workflow()` options (retries, backoff,
 * dead-letter limit), whatever the producer stored, also for rows the previous version wrote.
 */
import { Injectable } from '@nestjs/common';
import { DedupQueueConfigurationError, UnknownWorkflowError, Workflow } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';
import { moveWorkflowRow } from './support/workflow-rows';
import { expireExecutor, syncReadyRows } from './support/ready-rows';

/** The worker's version of the workflows: three attempts, a short backoff, its own dead-letter limit. */
@Injectable()
class ExtTasks {
  readonly calls = new Map<string, number>();

  @Workflow({ maxAttempts: 3, backoff: { initialDelayMs: 20, jitter: false }, maxRecoveryAttempts: 4 })
  async flaky(key: string): Promise<string> {
    const call = (this.calls.get(key) ?? 0) + 1;
    this.calls.set(key, call);
    if (call < 3) throw new Error(`attempt ${call} of ${key} fails`);
    return `${key} ok after ${call}`;
  }
}

/** An older build of the producer, with other options for the same workflow: one attempt, the default limit. */
@Injectable()
class StaleExtTasks {
  @Workflow({ name: 'ExtTasks.flaky', maxAttempts: 1 })
  async flaky(key: string): Promise<string> {
    throw new Error(`the producer never runs it (${key})`);
  }
}

describe('externalWorkflows: a producer without the code, a worker with it', () => {
  const schema = uniqueSchema('external');
  let pool: Pool;
  let worker: QueueApp;
  let producer: QueueApp;
  let staleProducer: QueueApp;

  const row = async (workflowId: string) =>
    (
      await pool.query(
        `SELECT status, attempts, failed_attempts, max_attempts, max_recovery_attempts
         FROM "${schema}".workflows WHERE workflow_id = $1`,
        [workflowId],
      )
    ).rows[0];

  beforeAll(async () => {
    pool = testPool();
    worker = await startQueueApp({ schema, pollIntervalMs: 100 }, [ExtTasks]);
    producer = await startQueueApp({ schema, worker: false, externalWorkflows: ['ExtTasks.flaky'] });
    staleProducer = await startQueueApp({ schema, worker: false }, [StaleExtTasks]);
  });

  afterAll(async () => {
    await staleProducer?.close();
    await producer?.close();
    await worker?.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  it('enqueues by name a workflow the producer does not have; the worker retries it by its own options', async () => {
    const handle = await producer.queues.enqueue<string>('tasks', 'ExtTasks.flaky', ['a'], { deduplicationId: 'a' });
    await expect(handle.getResult()).resolves.toBe('a ok after 3');
    expect(await row(handle.workflowId)).toMatchObject({
      status: 'SUCCESS',
      attempts: 3,
      failed_attempts: 2,
      max_attempts: 3,
      max_recovery_attempts: 4,
    });
  });

  it("dead-letters by the worker's maxRecoveryAttempts once it ran the workflow, not the producer's", async () => {
    const handle = await producer.queues.enqueue('tasks', 'ExtTasks.flaky', ['dl']);
    await handle.getResult();
    // As if its process had died while running it for the fourth time after as many recoveries.
    await moveWorkflowRow(pool, schema, handle.workflowId, 'workflow_history', 'workflow_queue');
    await pool.query(
      `UPDATE "${schema}".workflow_queue SET status = 'PENDING', executor_id = 'gone', recovery_attempts = 4,
         completed_at = NULL WHERE workflow_id = $1`,
      [handle.workflowId],
    );
    await expireExecutor(pool, schema, 'gone');
    const recovered = await waitFor(
      async () => {
        const stored = await row(handle.workflowId);
        return stored.status !== 'PENDING' && stored;
      },
      { what: 'a live executor to recover the orphan' },
    );
    expect(recovered).toMatchObject({ status: 'MAX_RECOVERY_ATTEMPTS_EXCEEDED', max_recovery_attempts: 4 });
  });

  it("applies the worker's options when the producer's own decorator says otherwise", async () => {
    const stale = staleProducer.get(StaleExtTasks);
    // Not due for a moment, so that the row is read as the producer wrote it, before a worker claims it.
    const handle = await staleProducer.queues.enqueue('tasks', stale.flaky, ['b'], { delayMs: 500 });
    const stored = await row(handle.workflowId);
    expect(stored.max_attempts).toBe(1);
    await expect(handle.getResult()).resolves.toBe('b ok after 3');
    expect(await row(handle.workflowId)).toMatchObject({ attempts: 3, max_attempts: 3, max_recovery_attempts: 4 });
  });

  it('still refuses a name neither registered nor listed, before writing anything', async () => {
    const before = await pool.query(`SELECT count(*)::int AS n FROM "${schema}".workflows`);
    const enqueue = producer.queues.enqueue('tasks', 'ExtTasks.flakey', ['c']);
    await expect(enqueue).rejects.toThrow(UnknownWorkflowError);
    await expect(producer.queues.enqueue('tasks', 'ExtTasks.flakey', ['c'])).rejects.toThrow(
      'forRoot({ externalWorkflows }) does not list it (listed: "ExtTasks.flaky")',
    );
    const after = await pool.query(`SELECT count(*)::int AS n FROM "${schema}".workflows`);
    expect(after.rows[0].n).toBe(before.rows[0].n);
  });

  it('also enqueues external workflows in bulk', async () => {
    const items = [{ args: ['d1'] }, { args: ['d2'] }];
    const results = await producer.queues.enqueueMany('tasks', 'ExtTasks.flaky', items);
    expect(results.map((result) => result.status)).toEqual(['created', 'created']);
    for (const { workflowId } of results) {
      await expect((await producer.queues.retrieve(workflowId)).getResult()).resolves.toMatch(/ok after 3$/);
    }
  });

  it("runs a row shaped as the previous version wrote it, by the worker's options", async () => {
    // The columns and values the previous release's inserter wrote, its producer's decorator saying 1 attempt.
    await pool.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, deduplication_id,
         active_deduplication_id, inputs, timeout_ms, max_attempts, max_recovery_attempts, partition_key, priority,
         not_before, dedup_window_ms, release_key_on_error, trace_context)
       VALUES ('legacy-1', 'tasks', 'ExtTasks.flaky', 'ENQUEUED', 'legacy', 'legacy', '["legacy"]', NULL, 1, 10,
         NULL, 0, now(), NULL, false, NULL)`,
    );
    await syncReadyRows(pool, schema);
    const handle = await worker.queues.retrieve<string>('legacy-1');
    await expect(handle.getResult()).resolves.toBe('legacy ok after 3');
    expect(await row('legacy-1')).toMatchObject({
      status: 'SUCCESS',
      attempts: 3,
      max_attempts: 3,
      max_recovery_attempts: 4,
    });
  });

  it('lets the worker list its own workflow as external too (one configuration for every process)', async () => {
    const both = await startQueueApp({ schema, worker: false, externalWorkflows: ['ExtTasks.flaky'] }, [ExtTasks]);
    try {
      const handle = await both.queues.enqueue('tasks', 'ExtTasks.flaky', ['e']);
      expect((await row(handle.workflowId)).max_attempts).toBe(3);
      await waitFor(async () => (await row(handle.workflowId)).status === 'SUCCESS', { what: 'the worker to run it' });
    } finally {
      await both.close();
    }
  });
});

describe('externalWorkflows validated at boot', () => {
  const schema = uniqueSchema('external_boot');
  let pool: Pool;

  beforeAll(() => {
    pool = testPool();
  });

  afterAll(async () => {
    await dropSchema(pool, schema);
    await pool.end();
  });

  it.each([
    ['not an array', 'ExtTasks.flaky', /`externalWorkflows` must be an array of workflow names/],
    ['an empty name', [''], /`externalWorkflows` holds ""; give workflow names of 1 to 255 characters/],
    ['a name that is not a string', [42], /`externalWorkflows` holds 42/],
    ['a name listed twice', ['A.run', 'A.run'], /`externalWorkflows` lists "A.run" twice/],
  ])('refuses %s', async (_what, externalWorkflows, message) => {
    const options = { schema, worker: false, externalWorkflows: externalWorkflows as string[] };
    const error = await startQueueApp(options).catch((failure: Error) => failure);
    expect(error).toBeInstanceOf(DedupQueueConfigurationError);
    expect((error as Error).message).toMatch(message);
  });
});
