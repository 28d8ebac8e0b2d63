/**
 * Upgrade in place (issue 20, item 5; issue 31, item 7; issue 32): a database made by an earlier release (0.2.0,
 * 1.0.0 and 1.1.0, each built from git at its last commit and run in a child process) is booted by this release. From 0.2.0 it applies
 * the breaking migration 013, which moves active work apart from history; from 1.0.0 the migrations after 018, from
 * 1.1.0 migration 023 (the history by ID only; none breaking). Every finished workflow keeps its status, result, error and steps; every queued, delayed or running one
 * keeps its key and runs exactly once (a delayed one not before its time, by the database's clock); every run gets a
 * version (1, what a workflow without `@Workflow({ version })` registers); the deduplication window still holds; the
 * follow-up runs after its holder; schedules keep their cursors. Then a process of the old release meets the
 * migrated schema: 0.2.0 refuses to start and writes nothing; 1.0.0 runs against it (one warning), enqueues and runs
 * its runs (version 1), and, as it cannot tell versions apart, also runs a version-2 run of a name it has (which is
 * why docs/upgrading.md says to upgrade every process before deploying a version 2); 1.1.0 runs against it too, and its
 * own rate-limited claim still counts the history's starts exactly (without the index migration 023 dropped) and
 * records none in `queue_starts`.
 * The migration's duration on 1,000,000 finished workflows is measured by bench/upgrade/measure.js, not here.
 */
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { QueueDeduplicatedError, ScheduleService, Step, Workflow, WorkflowFailedError } from 'nest-dedup-queue';
import { MIGRATIONS, QueueDatabase, runMigrations } from 'nest-dedup-queue/testing';
import type { Pool } from 'pg';
import { DataSource } from 'typeorm';
import { FixtureProcess, killFixtures, spawnFixture } from './fixtures/child-harness';
import type { IpcMessage } from './fixtures/child-ipc';
import { RUNS_TABLE_SQL, UpgradeTasks, decorateUpgradeTasks } from './fixtures/upgrade-tasks';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import {
  PREVIOUS_RELEASE,
  RELEASE_1_0,
  RELEASE_1_1,
  Release,
  buildPreviousRelease,
  describeWithPreviousRelease,
} from './support/previous-release';
import { QueueApp, startQueueApp } from './support/queue-app';
import { consecutiveSeconds, databaseNow, tickRuns } from './support/schedule-runs';
import { waitFor } from './support/wait-for';

decorateUpgradeTasks({ Workflow, Step });

/** How far ahead of the database's now() the previous release puts `upg-delayed`: past the kill and the boot. */
const DELAY_MS = 15_000;
const BUILD_TIMEOUT_MS = 300_000;
const FINISHED = ['upg-cancelled', 'upg-error', 'upg-success', 'upg-window'];
/** A daily partition of the history or the steps, e.g. `workflow_history_p20261202`, and its indexes. */
const DAILY_PARTITION = /_p\d{8}/;

interface SeededSchedule {
  name: string;
  paused: boolean;
  nextRunAt: string | null;
  lastRunAt: string | null;
  lastWorkflowId: string | null;
}

/** A row of the workflows view or the steps table. */
type Row = { workflow_id: string } & Record<string, unknown>;

interface Seeded extends IpcMessage {
  type: 'seeded';
  followUpId: string;
  followUpCreated: boolean;
  delayedRunAt: string;
  schedules: SeededSchedule[];
}

/** The releases upgraded from, with the last migration their schema has. */
const RELEASES: Array<Release & { lastMigration: number }> = [
  { ...PREVIOUS_RELEASE, lastMigration: 12 },
  { ...RELEASE_1_0, lastMigration: 18 },
  { ...RELEASE_1_1, lastMigration: 22 },
];

for (const release of RELEASES)
  describeWithPreviousRelease(`upgrade in place from ${release.version}`, () => upgradeFrom(release), release);

function upgradeFrom(release: Release & { lastMigration: number }): void {
  /** The breaking migrations after the release's own (13: the 1.0 layout; 25: ready rows apart): a new major. */
  const breakingAfter = MIGRATIONS.filter(({ version, breaking }) => version > release.lastMigration && breaking).map(
    ({ version }) => version,
  );
  const major = breakingAfter.length > 0;
  /** 1.1 on: a process claims only the versions it registers. */
  const knowsVersions = release.lastMigration >= 22;
  const schema = uniqueSchema('upgrade');
  /** A fresh install of this release, to compare the upgraded schema's shape with. */
  const freshSchema = uniqueSchema('upgrade_fresh');
  const executorId = `upgrade-${schema}`;
  let previousRelease: string;
  let pool: Pool;
  let app: QueueApp | undefined;
  let seeded: Seeded;
  let killedAt: Date;
  let bootedAt: Date;
  let missedTick: number;
  let bootStartedAt: number;
  /** What the previous release left, read from its tables after the kill. */
  const before: { finished: Row[]; steps: Row[]; active: Record<string, Row> } = {
    finished: [],
    steps: [],
    active: {},
  };

  beforeAll(async () => {
    previousRelease = buildPreviousRelease(release.commit);
    pool = testPool();
    await pool.query(`CREATE SCHEMA "${schema}"`);
    await pool.query(RUNS_TABLE_SQL(schema));
    UpgradeTasks.context = { pool, schema, release: 'new', blockHold: false };
  }, BUILD_TIMEOUT_MS);

  afterAll(async () => {
    await killFixtures();
    await app?.close();
    if (pool) {
      await dropSchema(pool, schema);
      await dropSchema(pool, freshSchema);
      await pool.end();
    }
  });

  const spawnPreviousRelease = (mode: 'seed' | 'boot' | 'work', name: string): FixtureProcess =>
    spawnFixture('child-previous-release.ts', name, {
      PREVIOUS_RELEASE_DIR: previousRelease,
      SCHEMA: schema,
      EXECUTOR: executorId,
      MODE: mode,
      DELAY_MS: String(DELAY_MS),
    });

  const runsOf = async (label: string) =>
    (
      await pool.query(`SELECT release, at FROM "${schema}".upgrade_runs WHERE label = $1 ORDER BY at`, [label])
    ).rows.map((row) => row.release);

  const statusOf = async (workflowId: string) => (await (await app!.queues.retrieve(workflowId)).getStatus()).status;

  const finishedRows = async (workflowIds: string[]) =>
    (
      await pool.query<Row>(
        `SELECT workflow_id, queue_name, workflow_name, status, output::text AS output, error::text AS error,
                deduplication_id, attempts, created_at, started_at, completed_at, executor_id
         FROM "${schema}".workflows WHERE workflow_id = ANY($1) ORDER BY workflow_id`,
        [workflowIds],
      )
    ).rows;

  const stepRows = async () =>
    (
      await pool.query<Row>(
        `SELECT workflow_id, step_index, step_name, output::text AS output, error::text AS error, started_at,
                completed_at
         FROM "${schema}".steps ORDER BY workflow_id, step_index`,
      )
    ).rows;

  /** Every table of the schema: its rows, as a digest, and its relations and columns. */
  const contentsOf = async () => {
    const { rows: tables } = await pool.query(
      `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.relname`,
      [schema],
    );
    const digests: Record<string, string> = {};
    for (const { relname } of tables) {
      const { rows } = await pool.query(
        `SELECT count(*)::int AS n, md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '')) AS digest
         FROM ONLY "${schema}"."${relname}" AS t`,
      );
      digests[relname] = `${rows[0].n} rows, ${rows[0].digest}`;
    }
    const { rows: shape } = await pool.query(
      `SELECT c.relname, c.relkind, a.attname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
       WHERE n.nspname = $1 ORDER BY c.relname, a.attnum`,
      [schema],
    );
    return { digests, shape };
  };

  /**
   * Relations (with partition bounds and storage options), columns, indexes, constraints and triggers; without the
   * daily partitions, which the running application makes (HistoryPartitions), not the migrations, and without the
   * test's own table `upgrade_runs` (PostgreSQL 18 lists its NOT NULL constraints too).
   */
  const shapeOf = async (target: string) => {
    const strip = (text: unknown) => String(text).split(`"${target}".`).join('').split(`${target}.`).join('');
    const select = async (sql: string) =>
      (await pool.query(sql, [target])).rows
        .map((row) => Object.values(row).map(strip).join(' | '))
        .filter((line) => !DAILY_PARTITION.test(line) && !line.includes('upgrade_runs'));
    return {
      relations: await select(
        `SELECT c.relname, c.relkind, pg_get_expr(c.relpartbound, c.oid), c.reloptions
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'S') ORDER BY 1`,
      ),
      columns: await select(
        `SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attidentity,
                pg_get_expr(d.adbin, d.adrelid)
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
         LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
         WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v') ORDER BY 1, 2`,
      ),
      indexes: await select(`SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY 1`),
      constraints: await select(
        `SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
         WHERE connamespace = $1::regnamespace ORDER BY 2, 1`,
      ),
      triggers: await select(
        `SELECT tgrelid::regclass::text, tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         WHERE c.relnamespace = $1::regnamespace AND NOT t.tgisinternal ORDER BY 2, 1`,
      ),
    };
  };

  it(`${release.version} makes the database: finished, queued, delayed, running and windowed workflows, a follow-up, schedules`, async () => {
    const child = spawnPreviousRelease('seed', 'previous-release-seed');
    seeded = await child.message<Seeded>('seeded', {}, 60_000);
    child.child.kill('SIGKILL');
    await child.waitForExit();
    killedAt = (await pool.query('SELECT now() AS now')).rows[0].now;
    // A tick of the catch-up schedule passes while no process runs: the new release must make it up.
    missedTick = Math.floor(killedAt.getTime() / 1000) * 1000 + 1000;
    await waitFor(async () => (await databaseNow(pool)) >= missedTick + 200, {
      what: 'a tick to pass with no process running',
    });

    const migrations = await pool.query(`SELECT max(version)::int AS version FROM "${schema}".schema_migrations`);
    expect(migrations.rows[0].version).toBe(release.lastMigration);
    before.finished = await finishedRows(FINISHED);
    expect(before.finished.map((row) => [row.workflow_id, row.status])).toEqual([
      ['upg-cancelled', 'CANCELLED'],
      ['upg-error', 'ERROR'],
      ['upg-success', 'SUCCESS'],
      ['upg-window', 'SUCCESS'],
    ]);
    before.steps = await stepRows();
    expect(before.steps.map((row) => [row.workflow_id, row.step_name, row.output])).toEqual([
      ['upg-error', 'UpgradeTasks.double', '2'],
      ['upg-running', 'UpgradeTasks.mark', '"marked running"'],
      ['upg-success', 'UpgradeTasks.double', '42'],
      ['upg-success', 'UpgradeTasks.label', '"#42"'],
      ['upg-window', 'UpgradeTasks.double', '10'],
      ['upg-window', 'UpgradeTasks.label', '"#10"'],
    ]);
    const { rows: active } = await pool.query(
      `SELECT workflow_id, status, queue_name, active_deduplication_id, next_deduplication_id, executor_id,
                not_before, not_before > now() AS delayed
         FROM "${schema}".workflows WHERE workflow_id LIKE 'upg-%' AND status IN ('ENQUEUED', 'PENDING')`,
    );
    before.active = Object.fromEntries(active.map((row) => [row.workflow_id, row]));
    expect(before.active['upg-running']).toMatchObject({
      status: 'PENDING',
      executor_id: executorId,
      active_deduplication_id: 'running-key',
    });
    expect(before.active['upg-queued-1']).toMatchObject({ status: 'ENQUEUED', active_deduplication_id: 'queued-1' });
    expect(before.active['upg-queued-2']).toMatchObject({ status: 'ENQUEUED', active_deduplication_id: 'queued-2' });
    expect(before.active['upg-delayed']).toMatchObject({
      status: 'ENQUEUED',
      active_deduplication_id: 'delayed-key',
      delayed: true,
    });
    expect(before.active['upg-delayed'].not_before).toEqual(new Date(seeded.delayedRunAt));
    expect(seeded.followUpCreated).toBe(true);
    expect(before.active[seeded.followUpId]).toMatchObject({ next_deduplication_id: 'running-key' });
    const paused = seeded.schedules.find((schedule) => schedule.name === 'upgrade-paused');
    expect(paused).toMatchObject({ paused: true, lastWorkflowId: expect.stringMatching(/^sched:upgrade-paused:/) });
    expect(paused!.lastRunAt).not.toBeNull();
  }, 90_000);

  it(`boots the new release on it, which applies the migrations after ${release.lastMigration} once`, async () => {
    bootStartedAt = await databaseNow(pool);
    app = await startQueueApp({ schema, executorId, queues: [{ name: 'upgrade' }, { name: 'parked' }] }, [
      UpgradeTasks,
    ]);
    bootedAt = (await pool.query('SELECT now() AS now')).rows[0].now;
    const { rows } = await pool.query(
      `SELECT version, breaking FROM "${schema}".schema_migrations WHERE version > $1 ORDER BY version`,
      [release.lastMigration],
    );
    expect(rows).toEqual(
      MIGRATIONS.filter(({ version }) => version > release.lastMigration).map(({ version, breaking }) => ({
        version,
        breaking: breaking === true,
      })),
    );
    expect(rows.filter((row) => row.breaking).map((row) => row.version)).toEqual(breakingAfter);
    const { rows: relations } = await pool.query(
      `SELECT relname, relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND relname IN ('workflow_queue', 'workflow_history', 'workflow_history_legacy', 'workflows')
       ORDER BY relname`,
      [schema],
    );
    expect(relations).toEqual([
      { relname: 'workflow_history', relkind: 'p' },
      { relname: 'workflow_history_legacy', relkind: 'r' },
      { relname: 'workflow_queue', relkind: 'r' },
      { relname: 'workflows', relkind: 'v' },
    ]);
  });

  it('gives every workflow a version (1) and keeps every key, and knows the names of the workflows it runs', async () => {
    const versions = await pool.query(
      `SELECT DISTINCT workflow_version FROM "${schema}".workflows WHERE workflow_id LIKE 'upg-%'`,
    );
    expect(versions.rows).toEqual([{ workflow_version: 1 }]);
    const keys = await pool.query(
      `SELECT workflow_id, active_deduplication_id FROM "${schema}".workflow_queue
       WHERE workflow_id = ANY($1) ORDER BY workflow_id`,
      [['upg-delayed', 'upg-queued-1', 'upg-queued-2', 'upg-window']],
    );
    expect(keys.rows).toEqual([
      { workflow_id: 'upg-delayed', active_deduplication_id: 'delayed-key' },
      { workflow_id: 'upg-queued-1', active_deduplication_id: 'queued-1' },
      { workflow_id: 'upg-queued-2', active_deduplication_id: 'queued-2' },
      { workflow_id: 'upg-window', active_deduplication_id: 'window-key' },
    ]);
    const registered = await pool.query(
      `SELECT workflow_name, version FROM "${schema}".registered_workflows ORDER BY workflow_name`,
    );
    expect(registered.rows).toEqual(
      ['fail', 'hold', 'record', 'succeed'].map((method) => ({ workflow_name: `UpgradeTasks.${method}`, version: 1 })),
    );
  });

  it('leaves the schema in the shape of a fresh install of this release', async () => {
    const dataSource = await new DataSource({ type: 'postgres', url: databaseUrl() }).initialize();
    try {
      await runMigrations(new QueueDatabase(dataSource, freshSchema, false), MIGRATIONS);
    } finally {
      await dataSource.destroy();
    }
    const upgraded = await shapeOf(schema);
    const fresh = await shapeOf(freshSchema);
    expect(upgraded.relations.length).toBeGreaterThan(10);
    expect(upgraded).toEqual(fresh);
  });

  it('keeps the delayed workflow DELAYED and its key held until its time', async () => {
    const runAt = new Date(seeded.delayedRunAt);
    const status = await (await app!.queues.retrieve('upg-delayed')).getStatus();
    expect({ status: status.status, notBefore: status.notBefore }).toEqual({ status: 'DELAYED', notBefore: runAt });
    const early = (await pool.query(`SELECT now() < $1 AS early`, [runAt])).rows[0].early;
    expect({ bootedAt, runAt, early }).toEqual({ bootedAt, runAt, early: true });
    const duplicate = await app!.queues
      .enqueue('upgrade', UpgradeTasks.prototype.record, ['delayed again'], { deduplicationId: 'delayed-key' })
      .catch((error: unknown) => error);
    expect(duplicate).toBeInstanceOf(QueueDeduplicatedError);
    expect(duplicate).toMatchObject({ existingWorkflowId: 'upg-delayed', deduplicationId: 'delayed-key' });
  });

  it('keeps the queued workflows and their keys on the paused queue, and runs each once when it resumes', async () => {
    expect((await app!.queues.getQueueSettings('parked')).paused).toBe(true);
    for (const n of [1, 2]) {
      expect(await statusOf(`upg-queued-${n}`)).toBe('ENQUEUED');
      const duplicate = await app!.queues
        .enqueue('parked', UpgradeTasks.prototype.record, ['again'], { deduplicationId: `queued-${n}` })
        .catch((error: unknown) => error);
      expect(duplicate).toBeInstanceOf(QueueDeduplicatedError);
      expect(duplicate).toMatchObject({ existingWorkflowId: `upg-queued-${n}`, queueName: 'parked' });
    }
    await app!.queues.resumeQueue('parked');
    for (const n of [1, 2]) {
      const handle = await app!.queues.retrieve(`upg-queued-${n}`);
      expect(await handle.getResult({ timeoutMs: 20_000 })).toBe(`recorded queued-${n}`);
      expect(await runsOf(`queued-${n}`)).toEqual(['new']);
    }
    expect(await runsOf('again')).toEqual([]);
  });

  it('recovers the running workflow at once under the same executor ID and runs it to the end once', async () => {
    const handle = await app!.queues.retrieve('upg-running');
    expect(await handle.getResult({ timeoutMs: 20_000 })).toBe('held running');
    // Started by the previous release (killed in its body), run again once by the new one.
    expect(await runsOf('running')).toEqual(['old', 'new']);
    // Its step, completed before the kill, is replayed from its checkpoint, not run again.
    expect(await runsOf('running:step')).toEqual(['old']);
    const ofRunning = (rows: Row[]) => rows.filter((row) => row.workflow_id === 'upg-running');
    expect(ofRunning(await stepRows())).toEqual(ofRunning(before.steps));
    expect((await handle.getStatus()).executorId).toBe(executorId);
  });

  it('runs the queue-next follow-up once, after its holder ended', async () => {
    const handle = await app!.queues.retrieve(seeded.followUpId);
    expect(await handle.getResult({ timeoutMs: 20_000 })).toBe('held follow-up');
    expect(await runsOf('follow-up')).toEqual(['new']);
    expect(await runsOf('follow-up:step')).toEqual(['new']);
    const { rows } = await pool.query(
      `SELECT (SELECT at FROM "${schema}".upgrade_runs WHERE label = 'follow-up') >=
              (SELECT completed_at FROM "${schema}".workflows WHERE workflow_id = 'upg-running') AS after_holder`,
    );
    expect(rows[0].after_holder).toBe(true);
  });

  it('starts the delayed workflow once, not before its time by the database clock', async () => {
    const handle = await app!.queues.retrieve('upg-delayed');
    expect(await handle.getResult({ timeoutMs: DELAY_MS + 20_000 })).toBe('recorded delayed');
    expect(await runsOf('delayed')).toEqual(['new']);
    const { rows } = await pool.query(
      `SELECT w.started_at >= $1::timestamptz AS started_on_time, r.at >= $1::timestamptz AS ran_on_time
       FROM "${schema}".workflows w, "${schema}".upgrade_runs r
       WHERE w.workflow_id = 'upg-delayed' AND r.label = 'delayed'`,
      [new Date(seeded.delayedRunAt)],
    );
    expect(rows).toEqual([{ started_on_time: true, ran_on_time: true }]);
  }, 60_000);

  it('keeps every finished workflow: status, result, error, times and steps', async () => {
    expect(await finishedRows(FINISHED)).toEqual(before.finished);
    const ofFinished = (rows: Row[]) => rows.filter((row) => FINISHED.includes(row.workflow_id));
    expect(ofFinished(await stepRows())).toEqual(ofFinished(before.steps));
    expect(ofFinished(before.steps)).toHaveLength(5);

    const success = await app!.queues.retrieve('upg-success');
    expect(await success.getResult()).toEqual({ doubled: 42, label: '#42' });
    expect((await success.getStatus()).status).toBe('SUCCESS');
    const failed = await app!.queues.retrieve('upg-error');
    const status = await failed.getStatus();
    expect(status).toMatchObject({ status: 'ERROR', error: { name: 'RangeError', message: 'refused: bad input' } });
    const failure = await failed.getResult().catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(WorkflowFailedError);
    expect(failure).toMatchObject({ causeName: 'RangeError', recordedError: { message: 'refused: bad input' } });
    expect(await statusOf('upg-cancelled')).toBe('CANCELLED');
    expect(await runsOf('cancelled')).toEqual([]);
    expect(await app!.queues.retrieve('upg-window').then((handle) => handle.getResult())).toEqual({
      doubled: 10,
      label: '#10',
    });
  });

  it('holds the deduplication window of a finished workflow', async () => {
    const duplicate = await app!.queues
      .enqueue('upgrade', UpgradeTasks.prototype.record, ['window again'], { deduplicationId: 'window-key' })
      .catch((error: unknown) => error);
    expect(duplicate).toBeInstanceOf(QueueDeduplicatedError);
    expect(duplicate).toMatchObject({
      queueName: 'upgrade',
      deduplicationId: 'window-key',
      existingWorkflowId: 'upg-window',
    });
    const { rows } = await pool.query(
      `SELECT count(*)::int AS n FROM "${schema}".workflows WHERE deduplication_id = 'window-key'`,
    );
    expect(rows[0].n).toBe(1);
  });

  it('keeps the schedules’ cursors: the paused one as it was, the catch-up one ticking on without gap', async () => {
    const schedules = app!.get(ScheduleService);
    const paused = (await schedules.list()).find((schedule) => schedule.name === 'upgrade-paused');
    const was = seeded.schedules.find((schedule) => schedule.name === 'upgrade-paused')!;
    expect({
      paused: paused?.paused,
      lastRunAt: paused?.lastRunAt?.toISOString() ?? null,
      lastWorkflowId: paused?.lastWorkflowId,
      nextRunAt: paused?.nextRunAt?.toISOString() ?? null,
    }).toEqual({
      paused: true,
      lastRunAt: was.lastRunAt,
      lastWorkflowId: was.lastWorkflowId,
      nextRunAt: was.nextRunAt,
    });

    // Every tick from the previous release's first one to two after the boot: none skipped, none twice.
    const runs = await waitFor(
      async () => {
        const all = await tickRuns(pool, schema, 'upgrade-catch-up');
        const settled = all.filter((run) => run.tick <= bootedAt.getTime() + 2000);
        return settled.length > 0 &&
          settled.at(-1)!.tick > bootedAt.getTime() &&
          settled.every((run) => run.status === 'SUCCESS')
          ? settled
          : undefined;
      },
      { timeoutMs: 20_000, what: 'upgrade-catch-up to tick past the boot' },
    );
    const ticks = runs.map((run) => run.tick);
    expect({ consecutive: consecutiveSeconds(ticks), distinct: new Set(ticks).size }).toEqual({
      consecutive: true,
      distinct: ticks.length,
    });
    expect(ticks[0]).toBeLessThan(killedAt.getTime());
    const missed = runs.find((run) => run.tick === missedTick);
    expect({ missed: missed?.workflowId, madeUpAfterBoot: missed && missed.createdAt >= bootStartedAt }).toEqual({
      missed: `sched:upgrade-catch-up:${new Date(missedTick).toISOString()}`,
      madeUpAfterBoot: true,
    });
  }, 30_000);

  if (major) {
    it(`refuses a process of ${release.version} on the migrated schema, which writes nothing`, async () => {
      await app!.close();
      app = undefined;
      const contents = await contentsOf();
      const child = spawnPreviousRelease('boot', 'previous-release-boot');
      const refused = await child.message<IpcMessage & { name: string; className: string; message: string }>('refused');
      expect({ name: refused.name, className: refused.className }).toEqual({
        name: 'DedupQueueConfigurationError',
        className: 'DedupQueueConfigurationError',
      });
      expect(refused.message).toContain(
        `Schema "${schema}" has migration ${breakingAfter.join(', ')} of a newer major version`,
      );
      expect(await child.waitForExit()).toEqual({ code: 0, signal: null });
      expect(await contentsOf()).toEqual(contents);
    });
  }

  if (knowsVersions && !major) {
    it(`counts the history's starts in a rate-limited claim of ${release.version} on the migrated schema: exact, without the dropped index`, async () => {
      // 1.1's own claimer, from its build: it counts the running workflows' and the history's started_at.
      const previous = createRequire(__filename)(join(previousRelease, 'dist', 'testing.js')) as Pick<
        typeof import('nest-dedup-queue/testing'),
        'QueueDatabase' | 'ExecutorStore' | 'WorkflowClaimer'
      >;
      await pool.query(
        `INSERT INTO "${schema}".workflow_history (workflow_id, queue_name, workflow_name, status, inputs, started_at,
                                                 completed_at)
         SELECT 'rated-done-' || i, 'rated', 'Rated.run', 'SUCCESS', '[]', now() - interval '2 seconds', now()
         FROM generate_series(1, 3) AS i`,
      );
      await pool.query(
        `INSERT INTO "${schema}".workflow_queue (workflow_id, queue_name, workflow_name, status, inputs)
         VALUES ('rated-next', 'rated', 'Rated.run', 'ENQUEUED', '[]')`,
      );
      const dataSource = await new DataSource({ type: 'postgres', url: databaseUrl() }).initialize();
      const database = new previous.QueueDatabase(dataSource, schema, false);
      try {
        await new previous.ExecutorStore(database).register('rated-1.1', {
          queues: ['rated'],
          workflows: [{ name: 'Rated.run', version: 1 }],
        });
        const claimer = new previous.WorkflowClaimer(database);
        const claim = (limit: number) =>
          claimer.claim({
            queue: { name: 'rated', workerConcurrency: 10, rateLimit: { limit, periodMs: 60_000 } },
            executorId: 'rated-1.1',
            limit: 10,
            claimKeys: ['1:Rated.run'],
          });
        const full = await claim(3);
        expect(full.workflows).toEqual([]);
        expect(full.retryInMs).toBeGreaterThan(50_000);
        expect((await claim(4)).workflows.map((workflow) => workflow.workflowId)).toEqual(['rated-next']);
        // It does not record its starts where 1.2 counts them (docs/upgrading.md).
        const starts = await pool.query(`SELECT 1 FROM "${schema}".queue_starts WHERE queue_name = 'rated'`);
        expect(starts.rowCount).toBe(0);
        await new previous.ExecutorStore(database).remove('rated-1.1');
        await pool.query(`DELETE FROM "${schema}".workflow_queue WHERE queue_name = 'rated'`);
      } finally {
        // NOTE: a QueueDatabase leaves a DataSource it was given open; the test made this one.
        await database.close();
        await dataSource.destroy();
      }
    });
  }

  if (!major) {
    it(`runs a process of ${release.version} on the migrated schema: one warning, its runs (version 1)${knowsVersions ? '' : ', and any version of its names'}`, async () => {
      app ??= await startQueueApp(
        { schema, executorId, worker: false, queues: [{ name: 'upgrade' }, { name: 'parked' }] },
        [UpgradeTasks],
      );
      // A run recorded at a version that release does not know: 1.0 cannot tell, and runs it as its own; 1.1 leaves it.
      const later = await app.queues.enqueue('upgrade', 'UpgradeTasks.record', ['a version 2 run'], {
        workflowId: 'v2-for-the-old-release',
        version: 2,
      });
      await app.close();
      app = undefined;
      const child = spawnPreviousRelease('work', 'previous-release-work');
      await child.message('booted');
      const newerSchema = new RegExp(
        `Schema "${schema}" is at migration \\d+, this version of nest-dedup-queue knows migrations up to ${release.lastMigration}: running against it`,
      );
      expect(
        child.messages.filter((message) => message.type === 'warned' && newerSchema.test(String(message.message))),
      ).toHaveLength(1);
      await child.message('booted');
      expect((await child.message<IpcMessage & { result: string }>('worked')).result).toBe(
        'recorded by the old release',
      );
      if (!knowsVersions) {
        await waitFor(async () => (await runsOf('a version 2 run')).length === 1, {
          what: 'the old release to run it',
        });
        expect(await runsOf('a version 2 run')).toEqual(['old']);
      }
      const rows = await pool.query(
        `SELECT workflow_id, status, workflow_version FROM "${schema}".workflows
         WHERE workflow_id IN ('old-after-upgrade', 'v2-for-the-old-release') ORDER BY workflow_id`,
      );
      // 1.0 moves a finished run to the history without the version: the column's default (1).
      expect(rows.rows).toEqual([
        { workflow_id: 'old-after-upgrade', status: 'SUCCESS', workflow_version: 1 },
        knowsVersions
          ? { workflow_id: 'v2-for-the-old-release', status: 'ENQUEUED', workflow_version: 2 }
          : { workflow_id: 'v2-for-the-old-release', status: 'SUCCESS', workflow_version: 1 },
      ]);
      expect(later.workflowId).toBe('v2-for-the-old-release');
      child.send({ type: 'stop' });
      await child.message('stopped');
      expect(await child.waitForExit()).toEqual({ code: 0, signal: null });
    });
  }
}
