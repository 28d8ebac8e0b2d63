import { DedupQueueConfigurationError } from 'nest-dedup-queue';
import { Migration, MIGRATIONS, QueueDatabase, runMigrations } from 'nest-dedup-queue/testing';
import type { Pool } from 'pg';
import { DataSource } from 'typeorm';
import { killFixtures, spawnFixture } from './fixtures/child-harness';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';

const LATEST_VERSION = MIGRATIONS[MIGRATIONS.length - 1].version;
const BOOTING_PROCESSES = 10;

/** A synthetic migration that comes after every real one, as the next release of the library would add it. */
const nextMigration = (name: string, up: (schemaSql: string) => string): Migration => ({
  version: LATEST_VERSION + 1,
  name,
  up,
});

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

    await expect(runMigrations(database, MIGRATIONS)).resolves.toEqual(MIGRATIONS.map((migration) => migration.version));
    await expect(runMigrations(database, MIGRATIONS)).resolves.toEqual([]);

    expect(await recorded(schema)).toEqual(records(MIGRATIONS));
    expect(await tableExists(schema, 'workflows')).toBe(true);
    const { rows } = await pool.query(
      `SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'workflows_active_deduplication_id'`,
      [schema],
    );
    expect(rows).toEqual([
      {
        indexdef:
          `CREATE UNIQUE INDEX workflows_active_deduplication_id ON ${schema}.workflows ` +
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
    expect((await pool.query(`SELECT count(*)::int AS count FROM pg_namespace WHERE nspname = $1`, [schema])).rows).toEqual([
      { count: 0 },
    ]);

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
      `INSERT INTO "${schema}".workflows
         (workflow_id, queue_name, workflow_name, status, deduplication_id, active_deduplication_id, inputs)
       VALUES ('kept', 'tasks', 'Tasks.run', 'ENQUEUED', 'user-1', 'user-1', '["x"]')`,
    );
    const addNote = nextMigration('add-note', (s) => `ALTER TABLE ${s}.workflows ADD COLUMN note text NOT NULL DEFAULT 'none'`);

    await expect(runMigrations(database, [...MIGRATIONS, addNote])).resolves.toEqual([addNote.version]);
    await expect(runMigrations(database, [...MIGRATIONS, addNote])).resolves.toEqual([]);

    expect(await recorded(schema)).toEqual(records([...MIGRATIONS, addNote]));
    const { rows } = await pool.query(
      `SELECT workflow_id, status, active_deduplication_id, inputs::text AS inputs, note FROM "${schema}".workflows`,
    );
    expect(rows).toEqual([
      { workflow_id: 'kept', status: 'ENQUEUED', active_deduplication_id: 'user-1', inputs: '["x"]', note: 'none' },
    ]);
    // The deduplication index still holds after the upgrade.
    await expect(
      pool.query(
        `INSERT INTO "${schema}".workflows (workflow_id, queue_name, workflow_name, status, active_deduplication_id, inputs)
         VALUES ('second', 'tasks', 'Tasks.run', 'ENQUEUED', 'user-1', '[]')`,
      ),
    ).rejects.toMatchObject({ code: '23505', constraint: 'workflows_active_deduplication_id' });
  });

  it('refuses a schema migrated by a newer version, telling to upgrade, and changes nothing', async () => {
    const schema = freshSchema('newer');
    const database = new QueueDatabase(dataSource, schema, false);
    await runMigrations(database, MIGRATIONS);
    const futureVersion = LATEST_VERSION + 1;
    await pool.query(`INSERT INTO "${schema}".schema_migrations (version, name) VALUES ($1, 'from-a-newer-release')`, [
      futureVersion,
    ]);
    const shapeBefore = await shapeOf(schema);
    const recordedBefore = await recorded(schema);

    const error = await runMigrations(database, MIGRATIONS).catch((caught: unknown) => caught);

    expect(error).toBeInstanceOf(DedupQueueConfigurationError);
    expect((error as Error).message).toContain(`Schema "${schema}" has migrations ${futureVersion}`);
    expect((error as Error).message).toMatch(/upgrade nest-dedup-queue/);
    expect(await shapeOf(schema)).toEqual(shapeBefore);
    expect(await recorded(schema)).toEqual(recordedBefore);
    // The migration lock was released: a process on other connections gets the same answer instead of waiting.
    await expect(runMigrations(new QueueDatabase(otherDataSource, schema, false), MIGRATIONS)).rejects.toThrow(
      /upgrade nest-dedup-queue/,
    );
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
    await expect(runMigrations(new QueueDatabase(otherDataSource, schema, false), [...MIGRATIONS, fixed])).resolves.toEqual([
      fixed.version,
    ]);
    expect(await tableExists(schema, 'half_done')).toBe(true);
  });
});
