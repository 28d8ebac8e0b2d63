import { ConsoleLogger } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { DedupQueueConfigurationError, DedupQueueModule, QueueService } from 'nest-dedup-queue';
import {
  ExecutorStore,
  Migration,
  MIGRATIONS,
  QueueDatabase,
  WorkflowClaimer,
  runMigrations,
} from 'nest-dedup-queue/testing';
import type { Pool } from 'pg';
import { DataSource } from 'typeorm';
import { killFixtures, spawnFixture } from './fixtures/child-harness';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { waitFor } from './support/wait-for';
import { DoublingTasks } from './fixtures/doubling-tasks';

const LATEST_VERSION = MIGRATIONS[MIGRATIONS.length - 1].version;
const BOOTING_PROCESSES = 10;

/** A synthetic migration that comes after every real one, as the next release of the library would add it. */
const nextMigration = (name: string, up: (schemaSql: string) => string): Migration => ({
  version: LATEST_VERSION + 1,
  name,
  up,
});

/** Keeps the module's warnings for assertions (and prints nothing). */
class CapturingLogger extends ConsoleLogger {
  readonly warnings: string[] = [];
  override log(): void {}
  override warn(message: unknown): void {
    this.warnings.push(String(message));
  }
}

describe('schema migrations', () => {
  const schemas: string[] = [];
  let pool: Pool;
  let dataSource: DataSource;
  /** A second pool: its sessions would wait for an advisory lock a failed run left behind, and give up after 5 s. */
  let otherDataSource: DataSource;

  /** A fresh schema for one test; each test migrates its own from scratch. */
  const freshSchema = (name: string): string => {
    const schema = uniqueSchema(`mig_${name}`);
    schemas.push(schema);
    return schema;
  };

  beforeAll(async () => {
    pool = testPool();
    dataSource = await new DataSource({ type: 'postgres', url: databaseUrl() }).initialize();
    otherDataSource = await new DataSource({
      type: 'postgres',
      url: databaseUrl(),
      extra: { options: '-c lock_timeout=5000' },
    }).initialize();
  });

  afterAll(async () => {
    await killFixtures();
    await dataSource?.destroy();
    await otherDataSource?.destroy();
    for (const schema of schemas) await dropSchema(pool, schema);
    await pool.end();
  });

  const recorded = async (schema: string) =>
    (await pool.query(`SELECT version, name FROM "${schema}".schema_migrations ORDER BY version`)).rows;

  const records = (migrations: readonly Migration[]) => migrations.map(({ version, name }) => ({ version, name }));

  const tableExists = async (schema: string, table: string): Promise<boolean> =>
    (await pool.query(`SELECT to_regclass($1) IS NOT NULL AS exists`, [`"${schema}".${table}`])).rows[0].exists;

  /** The schema's relations and columns, to show that a refused or failed run changed nothing. */
  const shapeOf = async (schema: string) => ({
    relations: (
      await pool.query(
        `SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 ORDER BY c.relname`,
        [schema],
      )
    ).rows,
    columns: (
      await pool.query(
        `SELECT table_name, column_name, data_type, column_default FROM information_schema.columns
         WHERE table_schema = $1 ORDER BY table_name, ordinal_position`,
        [schema],
      )
    ).rows,
  });

  it('applies every migration once; a second run applies nothing', async () => {
    const schema = freshSchema('twice');
    const database = new QueueDatabase(dataSource, schema, false);

    await expect(runMigrations(database, MIGRATIONS)).resolves.toEqual(
      MIGRATIONS.map((migration) => migration.version),
    );
    await expect(runMigrations(database, MIGRATIONS)).resolves.toEqual([]);

    expect(await recorded(schema)).toEqual(records(MIGRATIONS));
    expect(await tableExists(schema, 'workflows')).toBe(true);
    const { rows } = await pool.query(
      `SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'workflow_queue_deduplication_key'`,
      [schema],
    );
    expect(rows).toEqual([
      {
        indexdef:
          `CREATE UNIQUE INDEX workflow_queue_deduplication_key ON ${schema}.workflow_queue ` +
          'USING btree (queue_name, active_deduplication_id) WHERE (active_deduplication_id IS NOT NULL)',
      },
    ]);
  });

  it(`boots ${BOOTING_PROCESSES} OS processes at once on a fresh schema without error, recording each migration once`, async () => {
    const schema = freshSchema('boot');
    const children = Array.from({ length: BOOTING_PROCESSES }, (_, n) =>
      spawnFixture('child-boot.ts', `boot-${n}`, { SCHEMA: schema }),
    );
    await Promise.all(children.map((child) => child.message('ready')));
    expect(
      (await pool.query(`SELECT count(*)::int AS count FROM pg_namespace WHERE nspname = $1`, [schema])).rows,
    ).toEqual([{ count: 0 }]);

    for (const child of children) child.send({ type: 'go' });
    await Promise.all(children.map((child) => child.message('booted')));
    const exits = await Promise.all(children.map((child) => child.waitForExit()));

    expect(exits).toEqual(children.map(() => ({ code: 0, signal: null })));
    expect(await recorded(schema)).toEqual(records(MIGRATIONS));
    expect(await tableExists(schema, 'workflows')).toBe(true);
  });

  it('upgrades a schema migrated by an older version, applying only the new migration and keeping the data', async () => {
    const schema = freshSchema('upgrade');
    const database = new QueueDatabase(dataSource, schema, false);
    await runMigrations(database, MIGRATIONS);
    await pool.query(
      `INSERT INTO "${schema}".workflow_queue
         (workflow_id, queue_name, workflow_name, status, deduplication_id, active_deduplication_id, inputs)
       VALUES ('kept', 'tasks', 'Tasks.run', 'ENQUEUED', 'user-1', 'user-1', '["x"]')`,
    );
    const addNote = nextMigration(
      'add-note',
      (s) => `ALTER TABLE ${s}.workflow_queue ADD COLUMN note text NOT NULL DEFAULT 'none'`,
    );

    await expect(runMigrations(database, [...MIGRATIONS, addNote])).resolves.toEqual([addNote.version]);
    await expect(runMigrations(database, [...MIGRATIONS, addNote])).resolves.toEqual([]);

    expect(await recorded(schema)).toEqual(records([...MIGRATIONS, addNote]));
    const { rows } = await pool.query(
      `SELECT workflow_id, status, active_deduplication_id, inputs::text AS inputs, note FROM "${schema}".workflow_queue`,
    );
    expect(rows).toEqual([
      { workflow_id: 'kept', status: 'ENQUEUED', active_deduplication_id: 'user-1', inputs: '["x"]', note: 'none' },
    ]);
    // The deduplication index still holds after the upgrade.
    await expect(
      pool.query(
        `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, active_deduplication_id, inputs)
         VALUES ('second', 'tasks', 'Tasks.run', 'ENQUEUED', 'user-1', '[]')`,
      ),
    ).rejects.toMatchObject({ code: '23505', constraint: 'workflow_queue_deduplication_key' });
  });

  it('runs against a schema a newer release migrated further, with one warning naming both versions', async () => {
    const schema = freshSchema('newer');
    const database = new QueueDatabase(dataSource, schema, false);
    const addNote = nextMigration(
      'add-note',
      (s) => `ALTER TABLE ${s}.workflow_queue ADD COLUMN note text NOT NULL DEFAULT ''`,
    );
    await runMigrations(database, [...MIGRATIONS, addNote]);
    const shapeBefore = await shapeOf(schema);
    const recordedBefore = await recorded(schema);
    const warnings: string[] = [];

    await expect(runMigrations(database, MIGRATIONS, { warn: (line: string) => warnings.push(line) })).resolves.toEqual(
      [],
    );

    expect(warnings).toEqual([
      `Schema "${schema}" is at migration ${addNote.version}, this version of nest-dedup-queue knows migrations up to ` +
        `${LATEST_VERSION}: running against it (migrations stay compatible with the previous minor); ` +
        'upgrade this application',
    ]);
    expect(await shapeOf(schema)).toEqual(shapeBefore);
    expect(await recorded(schema)).toEqual(recordedBefore);
  });

  it('boots a whole module of the older release on the newer schema: it logs the warning once and runs workflows', async () => {
    const schema = freshSchema('newer_boot');
    const addNote = nextMigration(
      'add-note',
      (s) => `ALTER TABLE ${s}.workflow_queue ADD COLUMN note text NOT NULL DEFAULT ''`,
    );
    await runMigrations(new QueueDatabase(dataSource, schema, false), [...MIGRATIONS, addNote]);
    const logger = new CapturingLogger();
    const module = await Test.createTestingModule({
      imports: [DedupQueueModule.forRoot({ connection: { url: databaseUrl() }, schema, queues: [{ name: 'tasks' }] })],
      providers: [DoublingTasks],
    })
      .setLogger(logger)
      .compile();
    await module.init();
    try {
      const queue = module.get(QueueService);
      const handle = await queue.enqueue('tasks', module.get(DoublingTasks).double, [21]);

      await expect(handle.getResult()).resolves.toBe(42);
      expect(logger.warnings.filter((line) => line.startsWith(`Schema "${schema}" is at migration`))).toHaveLength(1);
    } finally {
      await module.close();
    }
  });

  it('refuses a schema with a breaking migration of a newer major, telling to upgrade, and changes nothing', async () => {
    const schema = freshSchema('breaking');
    const database = new QueueDatabase(dataSource, schema, false);
    const nextMajor = {
      ...nextMigration('next-major', (s) => `CREATE TABLE ${s}.next_major (id integer)`),
      breaking: true,
    };
    await runMigrations(database, [...MIGRATIONS, nextMajor]);
    const shapeBefore = await shapeOf(schema);
    const recordedBefore = await recorded(schema);

    const error = await runMigrations(database, MIGRATIONS).catch((caught: unknown) => caught);

    expect(error).toBeInstanceOf(DedupQueueConfigurationError);
    expect((error as Error).message).toBe(
      `Schema "${schema}" has migration ${nextMajor.version} of a newer major version of nest-dedup-queue, which ` +
        'this version cannot run against: upgrade nest-dedup-queue in this application',
    );
    expect(await shapeOf(schema)).toEqual(shapeBefore);
    expect(await recorded(schema)).toEqual(recordedBefore);
    // The migration lock was released: a process on other connections gets the same answer instead of waiting.
    await expect(runMigrations(new QueueDatabase(otherDataSource, schema, false), MIGRATIONS)).rejects.toThrow(
      /upgrade nest-dedup-queue/,
    );
  });

  it("refuses a schema whose newer migrations do not follow this release's own, and changes nothing", async () => {
    const schema = freshSchema('other_line');
    const database = new QueueDatabase(dataSource, schema, false);
    const theirs = nextMigration('theirs', (s) => `CREATE TABLE ${s}.theirs (id integer)`);
    await runMigrations(database, [...MIGRATIONS, theirs]);
    const recordedBefore = await recorded(schema);
    const ours = {
      ...nextMigration('ours', (s) => `CREATE TABLE ${s}.ours (id integer)`),
      version: theirs.version + 1,
    };

    await expect(runMigrations(database, [...MIGRATIONS, ours])).rejects.toThrow(
      `Schema "${schema}" has migrations ${theirs.version} that this version of nest-dedup-queue does not know, ` +
        `yet lacks its migration ${ours.version} (ours)`,
    );
    expect(await tableExists(schema, 'ours')).toBe(false);
    expect(await recorded(schema)).toEqual(recordedBefore);
  });

  it('reads a bookkeeping table made before the breaking column existed, and adds the column with the next migration', async () => {
    const schema = freshSchema('old_bookkeeping');
    const database = new QueueDatabase(dataSource, schema, false);
    await runMigrations(database, MIGRATIONS);
    await pool.query(`ALTER TABLE "${schema}".schema_migrations DROP COLUMN breaking`);

    await expect(runMigrations(database, MIGRATIONS)).resolves.toEqual([]);
    const addNote = nextMigration('add-note', (s) => `ALTER TABLE ${s}.workflow_queue ADD COLUMN note text`);
    await expect(runMigrations(database, [...MIGRATIONS, addNote])).resolves.toEqual([addNote.version]);

    const { rows } = await pool.query(
      `SELECT count(*)::int AS count, bool_or(breaking) AS any_breaking FROM "${schema}".schema_migrations`,
    );
    expect(rows).toEqual([{ count: MIGRATIONS.length + 1, any_breaking: false }]);
  });

  it("migration 23 keeps a rate window in flight (the last hour's starts copied to queue_starts) and drops the history's list indexes", async () => {
    const schema = freshSchema('starts');
    const database = new QueueDatabase(dataSource, schema, false);
    await runMigrations(
      database,
      MIGRATIONS.filter((migration) => migration.version <= 22),
    );
    await pool.query(
      `INSERT INTO "${schema}".workflow_history (workflow_id, queue_name, workflow_name, status, inputs, started_at,
                                               completed_at)
       VALUES ('done-1', 'rated', 'Tasks.run', 'SUCCESS', '[]', now() - interval '2 seconds', now()),
              ('done-2', 'rated', 'Tasks.run', 'ERROR', '[]', now() - interval '2 seconds', now()),
              ('done-old', 'rated', 'Tasks.run', 'SUCCESS', '[]', now() - interval '2 hours', now())`,
    );
    await pool.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, started_at,
                                             executor_id)
       VALUES ('running', 'rated', 'Tasks.run', 'PENDING', '[]', now() - interval '1 second', 'gone'),
              ('next', 'rated', 'Tasks.run', 'ENQUEUED', '[]', NULL, NULL)`,
    );

    await expect(
      runMigrations(
        database,
        MIGRATIONS.filter((migration) => migration.version <= 23),
      ),
    ).resolves.toEqual([23]);

    const starts = await pool.query(
      `SELECT queue_name, now() - started_at < interval '1 minute' AS recent FROM "${schema}".queue_starts`,
    );
    expect(starts.rows).toEqual(Array(3).fill({ queue_name: 'rated', recent: true }));
    const indexes = await pool.query(
      `SELECT indexname, indexdef ~ 'USING brin' AS brin FROM pg_indexes
       WHERE schemaname = $1 AND tablename = 'workflow_history' ORDER BY indexname`,
      [schema],
    );
    expect(indexes.rows).toEqual([
      { indexname: 'workflow_history_by_parent', brin: false },
      { indexname: 'workflow_history_completed_at', brin: true },
      { indexname: 'workflow_history_created_at', brin: true },
      { indexname: 'workflow_history_workflow_id', brin: false },
    ]);
    expect((await pool.query(`SELECT count(*)::int AS n FROM "${schema}".workflow_history`)).rows[0].n).toBe(3);

    // The copied starts fill a window of 3 a minute: the queued workflow waits for the first of them to leave it
    // (claimed by this release, once the later migrations ran: 25 writes the queued workflow's ready row).
    await expect(runMigrations(database, MIGRATIONS)).resolves.toEqual(
      MIGRATIONS.filter(({ version }) => version > 23).map(({ version }) => version),
    );
    await new ExecutorStore(database).register('claim-test', {
      queues: ['rated'],
      workflows: [{ name: 'Tasks.run', version: 1 }],
    });
    const claimer = new WorkflowClaimer(database);
    const claim = (limit: number) =>
      claimer.claim({
        queue: { name: 'rated', workerConcurrency: 10, rateLimit: { limit, periodMs: 60_000 } },
        executorId: 'claim-test',
        limit: 10,
        claimKeys: ['1:Tasks.run'],
      });
    const full = await claim(3);
    expect(full.workflows).toEqual([]);
    expect(full.retryInMs).toBeGreaterThan(50_000);
    expect((await claim(4)).workflows.map((workflow) => workflow.workflowId)).toEqual(['next']);
    expect((await pool.query(`SELECT count(*)::int AS n FROM "${schema}".queue_starts`)).rows[0].n).toBe(4);
  });

  it('migration 25 writes a ready row per queued workflow, counts the running ones, and makes a claim a HOT update', async () => {
    const schema = freshSchema('ready_apart');
    const database = new QueueDatabase(dataSource, schema, false);
    await runMigrations(
      database,
      MIGRATIONS.filter((migration) => migration.version <= 24),
    );
    await pool.query(
      `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs, priority,
                                             partition_key, executor_id, not_before)
       VALUES ('queued', 'tasks', 'Tasks.run', 'ENQUEUED', '[]', 2, 'p1', NULL, NULL),
              ('delayed', 'tasks', 'Tasks.run', 'ENQUEUED', '[]', 0, NULL, NULL, now() + interval '1 hour'),
              ('running', 'tasks', 'Tasks.run', 'PENDING', '[]', 0, 'p1', 'gone', NULL),
              ('asleep', 'tasks', 'Tasks.run', 'WAITING', '[]', 0, NULL, NULL, now() + interval '1 minute')`,
    );

    await expect(runMigrations(database, MIGRATIONS)).resolves.toEqual([25]);

    const ready = await pool.query(
      `SELECT r.workflow_id, r.priority, r.partition_key, r.seq = w.seq AS same_seq
       FROM "${schema}".workflow_ready AS r JOIN "${schema}".workflow_queue AS w USING (queue_name, workflow_id)
       ORDER BY r.workflow_id`,
    );
    expect(ready.rows).toEqual([
      { workflow_id: 'delayed', priority: 0, partition_key: null, same_seq: true },
      { workflow_id: 'queued', priority: 2, partition_key: 'p1', same_seq: true },
    ]);
    const rows = await pool.query(
      `SELECT workflow_id, counted_running, wake_at IS NOT NULL AS wakes FROM "${schema}".workflow_queue
       ORDER BY workflow_id`,
    );
    expect(rows.rows).toEqual([
      { workflow_id: 'asleep', counted_running: false, wakes: true },
      { workflow_id: 'delayed', counted_running: false, wakes: false },
      { workflow_id: 'queued', counted_running: false, wakes: false },
      { workflow_id: 'running', counted_running: true, wakes: false },
    ]);
    const indexes = await pool.query(
      `SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'workflow_queue' ORDER BY indexname`,
      [schema],
    );
    expect(indexes.rows.map((row: { indexname: string }) => row.indexname)).toEqual([
      'workflow_queue_by_parent',
      'workflow_queue_children',
      'workflow_queue_deadline',
      'workflow_queue_deduplication_key',
      'workflow_queue_follow_up_key',
      'workflow_queue_pkey',
      'workflow_queue_running',
      'workflow_queue_waiting',
    ]);

    // 200 workflows claimed by the claim of a queue without limits: HOT updates (no index entry moved).
    await pool.query(
      `WITH inserted AS (
         INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs)
         SELECT 'hot-' || i, 'hot', 'Tasks.run', 'ENQUEUED', '[]' FROM generate_series(1, 200) AS i
         RETURNING queue_name, priority, seq, workflow_id, partition_key
       )
       INSERT INTO "${schema}".workflow_ready (queue_name, priority, seq, workflow_id, partition_key)
       SELECT * FROM inserted`,
    );
    await pool.query(`VACUUM "${schema}".workflow_queue`);
    const updates = async () =>
      (
        await pool.query(
          `SELECT n_tup_upd::int AS updated, n_tup_hot_upd::int AS hot FROM pg_stat_user_tables
           WHERE relid = $1::regclass`,
          [`"${schema}".workflow_queue`],
        )
      ).rows[0] as { updated: number; hot: number };
    await waitFor(async () => (await updates()).updated >= 1, { what: "the migration's updates counted" });
    const before = await updates();
    await new ExecutorStore(database).register('hot-claims', {
      queues: ['hot'],
      workflows: [{ name: 'Tasks.run', version: 1 }],
    });
    const claimer = new WorkflowClaimer(database);
    const claimed = await claimer.claim({
      queue: { name: 'hot', workerConcurrency: 200 },
      executorId: 'hot-claims',
      limit: 200,
      claimKeys: ['1:Tasks.run'],
    });
    expect(claimed.workflows).toHaveLength(200);
    const after = await waitFor(
      async () => {
        const now = await updates();
        return now.updated >= before.updated + 200 && now;
      },
      { what: 'the claims counted' },
    );
    // A version that does not fit on its page goes to another, with its index entries (the study: 4-5% of claims).
    expect(after.updated - before.updated).toBe(200);
    expect(after.hot - before.hot).toBeGreaterThanOrEqual(180);
    expect(
      (await pool.query(`SELECT count(*)::int AS n FROM "${schema}".workflow_ready WHERE queue_name = 'hot'`)).rows[0]
        .n,
    ).toBe(0);
  });

  it('rolls a failing migration back entirely and names it in the error', async () => {
    const schema = freshSchema('failing');
    const database = new QueueDatabase(dataSource, schema, false);
    await runMigrations(database, MIGRATIONS);
    const shapeBefore = await shapeOf(schema);
    const broken = nextMigration(
      'half-done',
      (s) => `CREATE TABLE ${s}.half_done (id integer); INSERT INTO ${s}.half_done VALUES (1); SELECT 1 / 0;`,
    );

    const error = await runMigrations(database, [...MIGRATIONS, broken]).catch((caught: unknown) => caught);

    expect(error).toBeInstanceOf(DedupQueueConfigurationError);
    expect((error as Error).message).toContain(`Migration ${broken.version} (half-done) of schema "${schema}" failed`);
    expect((error as Error).message).toContain('division by zero');
    expect(await tableExists(schema, 'half_done')).toBe(false);
    expect(await recorded(schema)).toEqual(records(MIGRATIONS));
    expect(await shapeOf(schema)).toEqual(shapeBefore);
    // Once fixed it applies on the next start, from other connections (so the failed run released the lock).
    const fixed = nextMigration('half-done', (s) => `CREATE TABLE ${s}.half_done (id integer)`);
    await expect(
      runMigrations(new QueueDatabase(otherDataSource, schema, false), [...MIGRATIONS, fixed]),
    ).resolves.toEqual([fixed.version]);
    expect(await tableExists(schema, 'half_done')).toBe(true);
  });
});
