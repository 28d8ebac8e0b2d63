import type { Pool } from 'pg';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';
import { RecordingTasks } from './fixtures/recording-tasks';

describe('retention of finished workflows', () => {
  const schema = uniqueSchema('retention');
  let app: QueueApp;
  let pool: Pool;

  beforeAll(async () => {
    pool = testPool();
    app = await startQueueApp({ schema, retentionMs: 300, heartbeatIntervalMs: 100 }, [RecordingTasks]);
  });

  afterAll(async () => {
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  const exists = async (workflowId: string) =>
    (await pool.query(`SELECT 1 FROM "${schema}".workflows WHERE workflow_id = $1`, [workflowId])).rowCount === 1;

  it('deletes finished workflows after the retention period, keeping running, windowed and dead-lettered ones', async () => {
    const tasks = app.get(RecordingTasks);
    const done = await app.queues.enqueue('tasks', tasks.echo, ['old']);
    await done.getResult();
    const windowed = await app.queues.enqueue('tasks', tasks.echo, ['windowed'], {
      deduplicationId: 'w',
      deduplicationWindowMs: 60_000,
    });
    await windowed.getResult();
    const running = await app.queues.enqueue('tasks', tasks.blocked, ['retention']);
    await pool.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, completed_at)
       VALUES ('dead-lettered', 'tasks', 'RecordingTasks.echo', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED', '[]', now() - interval '1 day')`,
    );

    await waitFor(async () => !(await exists(done.workflowId)), { what: 'the finished workflow to be pruned' });
    expect(await exists(windowed.workflowId)).toBe(true);
    expect(await exists(running.workflowId)).toBe(true);
    expect(await exists('dead-lettered')).toBe(true);
    tasks.gate('retention').open();
    await running.getResult();
  });
});
