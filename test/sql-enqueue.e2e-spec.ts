/**
 * `<schema>.enqueue_workflow(...)`: enqueue from SQL, in the caller's transaction and from a trigger, with the rules
 * of `enqueue` (a held key is `created = false` with the holder's ID, never an error), clear errors before anything
 * is written, and workers woken when the caller commits (polling is off: only the notification can wake them).
 */
import type { Pool, PoolClient } from 'pg';
import { dropSchema, testPool, uniqueSchema } from './support/database';
import { QueueApp, startQueueApp } from './support/queue-app';
import { RecordingTasks } from './fixtures/recording-tasks';

describe('enqueue from SQL', () => {
  const schema = uniqueSchema('sql_enqueue');
  let app: QueueApp;
  let tasks: RecordingTasks;
  let pool: Pool;

  beforeAll(async () => {
    pool = testPool();
    app = await startQueueApp({ schema, pollIntervalMs: 3_600_000, queues: [{ name: 'tasks' }] }, [RecordingTasks]);
    tasks = app.get(RecordingTasks);
    await pool.query(`
      CREATE TABLE "${schema}".orders (id bigint PRIMARY KEY, customer text NOT NULL);
      CREATE FUNCTION "${schema}".fulfil_order() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM "${schema}".enqueue_workflow(
          queue_name => 'tasks', workflow_name => 'RecordingTasks.echo',
          args => json_build_array('order ' || NEW.id), deduplication_id => 'order-' || NEW.id);
        RETURN NEW;
      END $$;
      CREATE TRIGGER fulfil_order AFTER INSERT ON "${schema}".orders
        FOR EACH ROW EXECUTE FUNCTION "${schema}".fulfil_order();`);
  });

  afterAll(async () => {
    await app.close();
    await dropSchema(pool, schema);
    await pool.end();
  });

  const enqueue = async (client: Pool | PoolClient, args: string, more = '') =>
    (
      await client.query<{ workflow_id: string; created: boolean }>(
        `SELECT * FROM "${schema}".enqueue_workflow(queue_name => 'tasks', workflow_name => 'RecordingTasks.echo',
           args => '${args}'::json${more})`,
      )
    ).rows;
  const rowCount = async (workflowId: string) =>
    (await pool.query(`SELECT 1 FROM "${schema}".workflows WHERE workflow_id = $1`, [workflowId])).rowCount;

  it('enqueues a workflow that a worker runs once the caller commits', async () => {
    const [row] = await enqueue(pool, '["from sql"]');
    expect(row.created).toBe(true);
    await expect((await app.queues.retrieve(row.workflow_id)).getResult({ timeoutMs: 10_000 })).resolves.toBe(
      'from sql',
    );
  });

  it('answers a held key with the holder and created = false, and the caller’s transaction goes on', async () => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const [first] = await enqueue(client, '["held"]', ", deduplication_id => 'user-1', delay_ms => 60000");
      const [second] = await enqueue(client, '["again"]', ", deduplication_id => 'user-1'");
      await client.query(`INSERT INTO "${schema}".orders VALUES (0, 'still in the transaction')`);
      await client.query('COMMIT');
      expect(first.created).toBe(true);
      expect(second).toEqual({ workflow_id: first.workflow_id, created: false });
      const replaced = await enqueue(pool, '["replaced"]', ", deduplication_id => 'user-1', on_duplicate => 'replace'");
      expect(replaced).toEqual([{ workflow_id: first.workflow_id, created: false }]);
      const stored = await pool.query(
        `SELECT inputs::text AS inputs FROM "${schema}".workflows WHERE workflow_id = $1`,
        [first.workflow_id],
      );
      expect(stored.rows).toEqual([{ inputs: '["replaced"]' }]);
      await app.queues.cancel(first.workflow_id);
    } finally {
      client.release();
    }
  });

  it('treats a workflow ID given twice as one workflow', async () => {
    const [first] = await enqueue(pool, '["idem"]', ", new_workflow_id => 'sql-idem'");
    const [second] = await enqueue(pool, '["other"]', ", new_workflow_id => 'sql-idem'");
    expect([first, second]).toEqual([
      { workflow_id: 'sql-idem', created: true },
      { workflow_id: 'sql-idem', created: false },
    ]);
    await expect((await app.queues.retrieve('sql-idem')).getResult({ timeoutMs: 10_000 })).resolves.toBe('idem');
    expect(await enqueue(pool, '["after"]', ", new_workflow_id => 'sql-idem'")).toEqual([
      { workflow_id: 'sql-idem', created: false },
    ]);
  });

  it.each([
    ['an undeclared queue', `queue_name => 'nope', workflow_name => 'RecordingTasks.echo'`, /unknown queue "nope"/],
    ['an empty workflow name', `queue_name => 'tasks', workflow_name => ''`, /workflow_name must be/],
    ['args that are not an array', `queue_name => 'tasks', workflow_name => 'W.x', args => '{"a":1}'`, /JSON array/],
    ['a negative delay', `queue_name => 'tasks', workflow_name => 'W.x', delay_ms => -1`, /delay_ms must be 0 or more/],
    ['an unknown policy', `queue_name => 'tasks', workflow_name => 'W.x', on_duplicate => 'x'`, /on_duplicate must be/],
  ])('refuses %s with SQLSTATE 22023 and writes nothing', async (_what, call, message) => {
    const before = (await pool.query(`SELECT count(*)::int AS n FROM "${schema}".workflows`)).rows[0].n;
    await expect(pool.query(`SELECT * FROM "${schema}".enqueue_workflow(${call})`)).rejects.toMatchObject({
      code: '22023',
      message: expect.stringMatching(message),
    });
    expect((await pool.query(`SELECT count(*)::int AS n FROM "${schema}".workflows`)).rows[0].n).toBe(before);
  });

  it('lets a row insert enqueue its fulfilment in the same transaction, and a rollback leave nothing', async () => {
    await pool.query(`INSERT INTO "${schema}".orders VALUES (42, 'ada')`);
    const [run] = (
      await pool.query<{ workflow_id: string }>(
        `SELECT workflow_id FROM "${schema}".workflows WHERE deduplication_id = 'order-42'`,
      )
    ).rows;
    await expect((await app.queues.retrieve(run.workflow_id)).getResult({ timeoutMs: 10_000 })).resolves.toBe(
      'order 42',
    );

    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`INSERT INTO "${schema}".orders VALUES (43, 'grace')`);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    const rolledBack = await pool.query(`SELECT 1 FROM "${schema}".workflows WHERE deduplication_id = 'order-43'`);
    expect(rolledBack.rowCount).toBe(0);
    expect(tasks.calls.filter((call) => call.args[0] === 'order 43')).toEqual([]);
    expect(await rowCount(run.workflow_id)).toBe(1);
  });
});
