import { DedupQueueError, InvalidArgumentError, QueueService, setEvent } from 'nest-dedup-queue';
import type { Pool } from 'pg';
import { COMPOSE_SUITE, ComposeTasks } from './fixtures/child-compose-tasks';
import { useWorkerSuite } from './support/worker-suite';

/**
 * Workflow events (`setEvent` / `getEvent`, docs/composing-workflows.md): set in a worker process
 * (child-compose-worker.ts), read from the test's own worker-less process, on a real Postgres.
 */
describe('workflow events', () => {
  const suite = useWorkerSuite({ prefix: 'events', ...COMPOSE_SUITE });
  const { schema, release, startWorker } = suite;
  let pool: Pool;
  let queues: QueueService;
  let tasks: ComposeTasks;

  beforeAll(() => {
    ({ pool, tasks } = suite);
    queues = suite.app.queues;
  });

  it("reads another process's event, waiting until it is set; the last value wins", async () => {
    const key = 'progress';
    const handle = await queues.enqueue('parents', tasks.publisher, [key, 3]);
    const waiting = queues.getEvent(handle.workflowId, 'result', { timeoutMs: 20_000 });
    const worker = await startWorker('events-worker');
    await worker.message('mark', { key, kind: 'published' });
    await expect(queues.getEvent(handle.workflowId, 'progress', { timeoutMs: 0 })).resolves.toEqual({
      done: 3,
      of: 3,
    });
    await release(key);
    await expect(waiting).resolves.toBe(key);
    await expect(queues.getEvent(handle.workflowId, 'progress')).resolves.toBe('done');
    await expect(handle.getResult({ timeoutMs: 20_000 })).resolves.toBe(key);
    const { rows } = await pool.query(
      `SELECT queue_name, key, value FROM "${schema}".workflow_events WHERE workflow_id = $1 ORDER BY key`,
      [handle.workflowId],
    );
    expect(rows).toEqual([
      { queue_name: 'parents', key: 'progress', value: 'done' },
      { queue_name: 'parents', key: 'result', value: key },
    ]);
  });

  it('resolves with undefined after the timeout, for a key never set and for an unknown workflow', async () => {
    const handle = await queues.enqueue('parents', tasks.quickChild, ['never-run']);
    const started = Date.now();
    await expect(queues.getEvent(handle.workflowId, 'progress', { timeoutMs: 300 })).resolves.toBeUndefined();
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    await expect(queues.getEvent('no-such-workflow', 'progress', { timeoutMs: 50 })).resolves.toBeUndefined();
  });

  it('keeps the recorded events of a SIGKILLed workflow and does not set them again when it is recovered', async () => {
    const key = 'recovered';
    const first = await startWorker('recovered-events');
    const handle = await queues.enqueue('parents', tasks.publisher, [key, 2]);
    await first.message('mark', { key, kind: 'published' });
    first.child.kill('SIGKILL');
    await first.ended;
    const updatedAt = async () =>
      (
        await pool.query(
          `SELECT updated_at FROM "${schema}".workflow_events WHERE workflow_id = $1 AND key = 'progress'`,
          [handle.workflowId],
        )
      ).rows[0]?.updated_at as Date;
    const before = await updatedAt();

    const second = await startWorker('recovered-events');
    await second.message('mark', { key, kind: 'published', attempt: 2 });
    expect(await updatedAt()).toEqual(before);
    await release(key);
    await expect(handle.getResult({ timeoutMs: 20_000 })).resolves.toBe(key);
    await expect(queues.getEvent(handle.workflowId, 'progress', { timeoutMs: 0 })).resolves.toBe('done');
  });

  it('refuses setEvent outside a workflow and bad arguments to getEvent, before anything is read', async () => {
    await expect(setEvent('progress', 1)).rejects.toThrow(DedupQueueError);
    await expect(setEvent('progress', 1)).rejects.toThrow(/only available while a workflow runs/);
    await expect(queues.getEvent('', 'progress')).rejects.toThrow(InvalidArgumentError);
    await expect(queues.getEvent('id', '')).rejects.toThrow(InvalidArgumentError);
    await expect(queues.getEvent('id', 'progress', { timeoutMs: -1 })).rejects.toThrow(InvalidArgumentError);
  });
});
