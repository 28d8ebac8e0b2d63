/**
 * An enqueue-only role, as docs/production.md ("Security") sets it up: USAGE on the schema and EXECUTE on
 * `<schema>.enqueue_workflow(...)`, nothing else. It enqueues (with the function's rules: a held key answers with its
 * holder), and can do nothing else: no table or view to read or change, no other function to call. The function runs
 * with its owner's rights and a pinned `search_path`, so an object of the caller's (a `json_typeof` of its own, put
 * ahead of pg_catalog in its `search_path`) never runs inside it. On upgrade, a role that could enqueue from SQL
 * before (INSERT on the active table) keeps EXECUTE, and PUBLIC does not get it.
 */
import { MIGRATIONS, QueueDatabase, runMigrations } from 'nest-dedup-queue/testing';
import { Client, DatabaseError, Pool } from 'pg';
import { DataSource } from 'typeorm';
import { RecordingTasks } from './fixtures/recording-tasks';
import { databaseUrl, databaseUrlOf, dropSchema, testPool, uniqueSchema } from './support/database';
import { useQueueApp } from './support/queue-app';

/** The function's signature since migration 022 (`workflow_version` last); before it, without the last `integer`. */
const ENQUEUE_WORKFLOW =
  'enqueue_workflow(text, text, json, text, text, double precision, integer, text, text, integer)';
const ENQUEUE_WORKFLOW_BEFORE_022 =
  'enqueue_workflow(text, text, json, text, text, double precision, integer, text, text)';
const databaseName = () => new URL(databaseUrl()).pathname.slice(1);

describe('an enqueue-only role', () => {
  const suite = useQueueApp('enqueue_only', { queues: [{ name: 'tasks' }] }, [RecordingTasks], {
    tasks: RecordingTasks,
  });
  const role = `${suite.schema}_enqueuer`;
  let admin: Pool;
  let enqueuer: Client;

  beforeAll(async () => {
    const { schema } = suite;
    admin = testPool();
    await admin.query(`CREATE ROLE "${role}" LOGIN`);
    await admin.query(`GRANT USAGE ON SCHEMA "${schema}" TO "${role}"`);
    await admin.query(`GRANT EXECUTE ON FUNCTION "${schema}".${ENQUEUE_WORKFLOW} TO "${role}"`);
    // A schema of its own, to try to hijack the function with objects of its own.
    await admin.query(`CREATE SCHEMA "${role}" AUTHORIZATION "${role}"`);
    enqueuer = new Client({ connectionString: databaseUrlOf(databaseName(), role) });
    await enqueuer.connect();
  });

  afterAll(async () => {
    await enqueuer?.end();
    await admin.query(`DROP SCHEMA IF EXISTS "${role}" CASCADE`);
    await admin.query(`DROP OWNED BY "${role}"`);
    await admin.query(`DROP ROLE IF EXISTS "${role}"`);
    await admin.end();
  });

  /** `delayMs` keeps the workflow queued (its key held) for that long. */
  const enqueue = (args: string, key: string, delayMs = 0) =>
    enqueuer.query<{ workflow_id: string; created: boolean }>(
      `SELECT * FROM "${suite.schema}".enqueue_workflow(queue_name => 'tasks', workflow_name => 'RecordingTasks.echo',
         args => $1::json, deduplication_id => $2, delay_ms => $3)`,
      [args, key, delayMs],
    );
  const refusal = (sql: string) =>
    enqueuer.query(sql).then(
      () => 'allowed',
      (error: DatabaseError) => error.code,
    );

  it('enqueues through the function, with its rules, and the worker runs what it enqueued', async () => {
    const { rows: first } = await enqueue('["from the enqueuer"]', 'once');
    expect(first).toEqual([{ workflow_id: expect.any(String), created: true }]);
    await expect((await suite.app.queues.retrieve(first[0].workflow_id)).getResult()).resolves.toBe(
      'from the enqueuer',
    );
    const held = await enqueue('["held"]', 'held-key', 60_000);
    const { rows: again } = await enqueue('["again"]', 'held-key');
    expect(again).toEqual([{ workflow_id: held.rows[0].workflow_id, created: false }]);
  });

  it('can read, change or call nothing else', async () => {
    const { schema } = suite;
    for (const sql of [
      `SELECT * FROM "${schema}".workflows`,
      `SELECT * FROM "${schema}".workflow_queue`,
      `SELECT * FROM "${schema}".workflow_history`,
      `SELECT * FROM "${schema}".queues`,
      `SELECT * FROM "${schema}".input_limits`,
      `UPDATE "${schema}".workflow_queue SET priority = 1`,
      `DELETE FROM "${schema}".workflow_queue`,
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs)
       VALUES ('x', 'tasks', 'RecordingTasks.echo', 'ENQUEUED', '[]')`,
      `UPDATE "${schema}".input_limits SET max_value_bytes = 1000000000`,
      `SELECT "${schema}".assert_enqueue_input('tasks', 'RecordingTasks.echo', '[]', NULL, NULL, NULL)`,
    ]) {
      expect([sql, await refusal(sql)]).toEqual([sql, '42501']);
    }
    const { rows: callable } = await admin.query(
      `SELECT p.proname AS function FROM pg_proc AS p
       WHERE p.pronamespace = $1::regnamespace AND has_function_privilege($2, p.oid, 'EXECUTE')`,
      [`"${schema}"`, role],
    );
    expect(callable).toEqual([{ function: 'enqueue_workflow' }]);
  });

  it('never runs an object of the caller’s inside the function', async () => {
    await enqueuer.query(`
      CREATE FUNCTION "${role}".json_typeof(json) RETURNS text LANGUAGE sql AS $$ SELECT 'hijacked' $$;
      CREATE FUNCTION "${role}".octet_length(text) RETURNS integer LANGUAGE sql AS $$ SELECT 0 $$;
      SET search_path = "${role}", pg_catalog, pg_temp`);
    try {
      expect((await enqueuer.query(`SELECT json_typeof('[]'::json) AS type`)).rows).toEqual([{ type: 'hijacked' }]);
      const { rows } = await enqueue('["with my search_path"]', 'search-path');
      expect(rows[0].created).toBe(true);
      await expect(enqueue('"not an array"', 'refused')).rejects.toMatchObject({ code: '22023' });
    } finally {
      await enqueuer.query('RESET search_path');
    }
  });
});

describe('upgrading a schema whose roles enqueued from SQL', () => {
  const schema = uniqueSchema('enqueue_grants');
  const inserter = `${schema}_inserter`;
  const reader = `${schema}_reader`;
  let pool: Pool;
  let dataSource: DataSource;

  beforeAll(() => {
    pool = testPool();
  });

  afterAll(async () => {
    await dataSource?.destroy();
    await dropSchema(pool, schema);
    for (const role of [inserter, reader]) {
      await pool.query(`DROP OWNED BY "${role}"`);
      await pool.query(`DROP ROLE IF EXISTS "${role}"`);
    }
    await pool.end();
  });

  it('grants EXECUTE to the roles that held INSERT on the active table, and to no one else', async () => {
    dataSource = await new DataSource({ type: 'postgres', url: databaseUrl() }).initialize();
    const database = new QueueDatabase(dataSource, schema, false);
    const before = MIGRATIONS.filter((migration) => migration.version < 19);
    await runMigrations(database, before);
    for (const role of [inserter, reader]) await pool.query(`CREATE ROLE "${role}"`);
    await pool.query(`GRANT USAGE ON SCHEMA "${schema}" TO "${inserter}", "${reader}"`);
    await pool.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON "${schema}".workflow_queue TO "${inserter}"`);
    await pool.query(`GRANT SELECT ON "${schema}".workflows TO "${reader}"`);
    const canExecute = async (role: string, signature = ENQUEUE_WORKFLOW) =>
      (
        await pool.query<{ allowed: boolean }>(`SELECT has_function_privilege($1, $2, 'EXECUTE') AS allowed`, [
          role,
          `"${schema}".${signature}`,
        ])
      ).rows[0].allowed;
    expect([
      await canExecute(inserter, ENQUEUE_WORKFLOW_BEFORE_022),
      await canExecute(reader, ENQUEUE_WORKFLOW_BEFORE_022),
    ]).toEqual([true, true]);

    await runMigrations(database, MIGRATIONS);

    // Migration 019 grants it to the role that could insert; 022, which gives the function a parameter, keeps that.
    expect([await canExecute(inserter), await canExecute(reader)]).toEqual([true, false]);
    const { rows } = await pool.query(
      `SELECT p.prosecdef AS definer, p.proconfig AS config FROM pg_proc AS p WHERE p.oid = $1::regprocedure`,
      [`"${schema}".${ENQUEUE_WORKFLOW}`],
    );
    expect(rows).toEqual([{ definer: true, config: ['search_path=pg_catalog, pg_temp'] }]);
  });
});
