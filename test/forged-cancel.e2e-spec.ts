/**
 * Any role that can connect may NOTIFY any channel, the module's cancel channel included: a notification is only a
 * hint, and a worker stops a run only once the database has it cancelled. A role with no grants sends every form of
 * the cancel payload for a running workflow, which finishes normally and lets go of its key; a genuine cancel from
 * another process still stops its run promptly (polling is off, so only the notification can do it).
 */
import { QueueService } from 'nest-dedup-queue';
import { Client, Pool } from 'pg';
import { HeldTasks } from './fixtures/held-tasks';
import { databaseUrl, databaseUrlOf, testPool } from './support/database';
import { QueueApp, QueueAppSuite, startQueueApp, useQueueApp } from './support/queue-app';
import { waitFor } from './support/wait-for';

describe('a cancel notification from a login with no grants', () => {
  const suite: QueueAppSuite<HeldTasks> = useQueueApp<HeldTasks>(
    'forged_cancel',
    { pollIntervalMs: 3_600_000, queues: [{ name: 'tasks' }] },
    [HeldTasks],
    { tasks: HeldTasks, beforeClose: () => suite.tasks?.openAll() },
  );
  const role = `${suite.schema}_nobody`;
  let other: QueueApp;
  let nobody: Client;
  let admin: Pool;

  beforeAll(async () => {
    admin = testPool();
    await admin.query(`CREATE ROLE "${role}" LOGIN`);
    nobody = new Client({ connectionString: databaseUrlOf(new URL(databaseUrl()).pathname.slice(1), role) });
    await nobody.connect();
    other = await startQueueApp({ schema: suite.schema, worker: false });
  });

  afterAll(async () => {
    await nobody?.end();
    await other?.close();
    await admin.query(`DROP ROLE IF EXISTS "${role}"`);
    await admin.end();
  });

  it('leaves the run alone; it finishes, records its result and lets go of its key', async () => {
    const { app, tasks, schema } = suite;
    const target = await app.queues.enqueue('tasks', tasks.hold, ['target'], {
      workflowId: 'order-42',
      deduplicationId: 'order-42',
    });
    const marker = await app.queues.enqueue('tasks', tasks.hold, ['marker'], { workflowId: 'marker-1' });
    await waitFor(() => tasks.running.has('target') && tasks.running.has('marker'), { what: 'both runs' });
    const { rows: grants } = await nobody.query(
      `SELECT has_schema_privilege(current_user, $1, 'USAGE') AS usage, rolsuper FROM pg_roles WHERE rolname = current_user`,
      [schema],
    );
    expect(grants).toEqual([{ usage: false, rolsuper: false }]);

    const channel = `dedup_queue_cancel:${schema}`;
    for (const payload of ['c:1:order-42', 't:1:order-42', 'c:99:order-42', 'c:order-42', 'c:', 't:', '']) {
      await nobody.query('SELECT pg_notify($1, $2)', [channel, payload]);
    }
    // NOTE: notifications arrive in commit order: once the genuine cancel below reached the worker, so had those.
    const cancelledAt = Date.now();
    await other.get(QueueService).cancel(marker.workflowId);
    await waitFor(() => tasks.aborted.has('marker'), { what: 'the genuine cancel to stop its run', timeoutMs: 5000 });
    const cancelMs = Date.now() - cancelledAt;
    expect(cancelMs).toBeLessThan(2000);
    expect(tasks.aborted.get('marker')).toMatch(/cancelled/);

    expect([...tasks.aborted.keys()]).toEqual(['marker']);
    await expect(target.getStatus()).resolves.toMatchObject({ status: 'PENDING' });
    tasks.gate('target').open();
    await expect(target.getResult({ timeoutMs: 10_000 })).resolves.toBe('done target');
    await expect(target.getStatus()).resolves.toMatchObject({ status: 'SUCCESS' });
    const again = await app.queues.enqueue('tasks', tasks.hold, ['again'], { deduplicationId: 'order-42' });
    expect(again.workflowId).not.toBe(target.workflowId);
    tasks.gate('again').open();
    await expect(again.getResult({ timeoutMs: 10_000 })).resolves.toBe('done again');
  });
});
