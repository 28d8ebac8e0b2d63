import type { Pool } from 'pg';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';
import { RecordingTasks } from './fixtures/recording-tasks';
import { TimedTasks, maxOverlap } from './fixtures/timed-tasks';
import { syncReadyRows } from './support/ready-rows';

describe('scheduler', () => {
  let pool: Pool;
  const schemas: string[] = [];
  const apps: QueueApp[] = [];

  const start = async (...args: Parameters<typeof startQueueApp>) => {
    const app = await startQueueApp(...args);
    apps.push(app);
    return app;
  };
  const newSchema = (name: string) => {
    const schema = uniqueSchema(name);
    schemas.push(schema);
    return schema;
  };
  const countByStatus = async (schema: string) =>
    Object.fromEntries(
      (await pool.query(`SELECT status, count(*)::int AS n FROM "${schema}".workflows GROUP BY status`)).rows.map(
        (row) => [row.status, row.n],
      ),
    );

  beforeAll(() => {
    pool = testPool();
  });

  afterAll(async () => {
    for (const app of apps) {
      try {
        app.get(RecordingTasks).gates.forEach((gate) => gate.open());
      } catch {
        // this app has no RecordingTasks
      }
    }
    await Promise.all(apps.map((app) => app.close()));
    for (const schema of schemas) await dropSchema(pool, schema);
    await pool.end();
  });

  it('runs at most workerConcurrency workflows at once in one process', async () => {
    const schema = newSchema('wc');
    const app = await start({ schema, queues: [{ name: 'tasks', workerConcurrency: 3 }] }, [RecordingTasks]);
    const tasks = app.get(RecordingTasks);
    const handles = await Promise.all(
      Array.from({ length: 12 }, () => app.queues.enqueue('tasks', tasks.blocked, ['wc'])),
    );
    await waitFor(() => tasks.running === 3, { what: '3 running' });
    expect(await countByStatus(schema)).toEqual({ PENDING: 3, ENQUEUED: 9 });
    tasks.gate('wc').open();
    await Promise.all(handles.map((handle) => handle.getResult()));
    expect(tasks.maxRunning).toBe(3);
    expect(await countByStatus(schema)).toEqual({ SUCCESS: 12 });
  });

  it('holds a global concurrency limit across two executors sharing the database', async () => {
    const schema = newSchema('global');
    const queues = [{ name: 'tasks', concurrency: 4, workerConcurrency: 4 }];
    const first = await start({ schema, queues, executorId: 'first' }, [TimedTasks]);
    const second = await start({ schema, queues, executorId: 'second' }, [TimedTasks]);
    const handles = await Promise.all(
      Array.from({ length: 40 }, (_, id) => first.queues.enqueue('tasks', first.get(TimedTasks).work, [id, 25])),
    );
    await Promise.all(handles.map((handle) => handle.getResult()));
    const intervals = [...first.get(TimedTasks).intervals, ...second.get(TimedTasks).intervals];
    expect(intervals).toHaveLength(40);
    expect(maxOverlap(intervals)).toBeLessThanOrEqual(4);
    expect(maxOverlap(intervals)).toBeGreaterThanOrEqual(2);
    const byExecutor = (
      await pool.query(`SELECT executor_id, count(*)::int AS n FROM "${schema}".workflows GROUP BY 1`)
    ).rows;
    expect(byExecutor.reduce((sum, row) => sum + row.n, 0)).toBe(40);
  });

  it('starts new work on the enqueue notification, not on the polling interval', async () => {
    const schema = newSchema('notify');
    const app = await start({ schema, pollIntervalMs: 600_000 }, [RecordingTasks]);
    const tasks = app.get(RecordingTasks);
    for (let round = 0; round < 5; round++) {
      const handle = await app.queues.enqueue('tasks', tasks.echo, [round]);
      await expect(handle.getResult({ timeoutMs: 5_000 })).resolves.toBe(round);
    }
  });

  it('falls back to polling for work that arrived without a notification', async () => {
    const schema = newSchema('poll');
    const app = await start({ schema, pollIntervalMs: 100 }, [RecordingTasks]);
    await pool.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs)
       VALUES ('silent', 'tasks', 'RecordingTasks.echo', 'ENQUEUED', '["quiet"]')`,
    );
    await syncReadyRows(pool, schema);
    await expect((await app.queues.retrieve('silent')).getResult({ timeoutMs: 5_000 })).resolves.toBe('quiet');
  });

  it('never runs work in a process started with worker: false, and leaves it for a worker', async () => {
    const schema = newSchema('producer');
    const producer = await start({ schema, worker: false }, [RecordingTasks]);
    const handle = await producer.queues.enqueue('tasks', producer.get(RecordingTasks).echo, ['later']);
    await expect(handle.getResult({ timeoutMs: 300 })).rejects.toThrow(/did not finish within 300 ms/);
    expect(producer.get(RecordingTasks).calls).toEqual([]);
    const worker = await start({ schema }, [RecordingTasks]);
    await expect(handle.getResult({ timeoutMs: 5_000 })).resolves.toBe('later');
    expect(worker.get(RecordingTasks).calls).toEqual([{ name: 'echo', args: ['later'] }]);
  });

  it('claims only workflows this process has registered', async () => {
    const schema = newSchema('unknown');
    const timed = await start({ schema, pollIntervalMs: 50 }, [TimedTasks]);
    await pool.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs)
       VALUES ('foreign', 'tasks', 'SomeoneElse.run', 'ENQUEUED', '[]')`,
    );
    await syncReadyRows(pool, schema);
    const handle = await timed.queues.enqueue('tasks', timed.get(TimedTasks).work, [1, 1]);
    await handle.getResult();
    expect(await countByStatus(schema)).toEqual({ ENQUEUED: 1, SUCCESS: 1 });
  });
});
