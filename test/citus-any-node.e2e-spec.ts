import { Test } from '@nestjs/testing';
import { Injectable } from '@nestjs/common';
import {
  DedupQueueConfigurationError,
  DedupQueueModule,
  DedupQueueModuleOptions,
  QueueDeduplicatedError,
  QueueService,
  Workflow,
} from 'nest-dedup-queue';
import { Client, Pool } from 'pg';
import { FixtureProcess, killFixtures, spawnFixture } from './fixtures/child-harness';
import { DoublingTasks } from './fixtures/doubling-tasks';
import { useCitusCluster } from './support/citus-suite';
import { COORDINATOR_TABLES, citusLocalTables } from './support/citus-coordinator-tables';
import { uniqueSchema } from './support/database';
import { describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

/** The crash fixture's workflow (test/fixtures/child-worker.ts), as this process runs it once recovered. */
@Injectable()
class HoldingTasks {
  @Workflow()
  async hold(key: string): Promise<string> {
    return `recovered ${key}`;
  }
}

/**
 * Application instances on any node of a Citus cluster (issue 36, item 2; docs/citus.md, "Worker nodes"). An instance
 * on a worker node boots once an instance on the coordinator migrated and distributed the schema (and waits for it
 * meanwhile, then fails with a typed error), writes no DDL, enqueues and drains with wake-ups sent through its node
 * (polling at 60 s, so only a NOTIFY can wake it), shares a queue with instances on other nodes (one winner per
 * deduplication key), and its workflow is recovered elsewhere when its process dies (the upgrade of a 1.1 cluster is
 * in citus-upgrade-from-1-1.e2e-spec.ts). Then the
 * behaviours of Citus 13 the docs cite, so that a Citus release that changes one shows here.
 */
describeWithTools(['postgres-15', 'citus'], 'Citus: instances on any node', () => {
  const citus = useCitusCluster({ beforeClose: killFixtures });

  async function boot(
    url: string,
    options: Partial<DedupQueueModuleOptions> & { schema: string },
    providers: unknown[] = [DoublingTasks],
  ) {
    const module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url },
          queues: [{ name: 'tasks' }],
          retryAttempts: 0,
          pollIntervalMs: 60_000,
          ...options,
        }),
      ],
      providers: providers as never[],
    }).compile();
    citus.closeAfter(module);
    await module.init();
    return module;
  }

  async function schemaExists(pool: Pool, schema: string): Promise<boolean> {
    const { rows } = await pool.query(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [schema]);
    return rows.length > 0;
  }

  it('makes the coordinator tables Citus local tables, readable from a worker node', async () => {
    const schema = uniqueSchema('anynode');
    await boot(citus.cluster.url, { schema, distribution: 'citus' });
    expect(await citusLocalTables(citus.coordinator, schema)).toEqual([...COORDINATOR_TABLES].sort());
    const { rows } = await citus.worker(0).query(`SELECT count(*)::int AS n FROM "${schema}".executors`);
    expect(rows).toEqual([{ n: 1 }]);
  });

  it('refuses a worker node without distribution citus, and one whose schema no coordinator instance made', async () => {
    const schema = uniqueSchema('anynode');
    const [{ groupid }] = (await citus.worker(0).query<{ groupid: number }>('SELECT groupid FROM pg_dist_local_group'))
      .rows;
    expect(groupid).toBeGreaterThan(0);
    const withoutCitus = boot(citus.cluster.workerUrls[0], { schema });
    await expect(withoutCitus).rejects.toThrow(DedupQueueConfigurationError);
    await expect(withoutCitus).rejects.toThrow(
      new RegExp(`is a worker node of a Citus cluster \\(group ${groupid}\\): set \`distribution: 'citus'\``),
    );
    const unmigrated = boot(citus.cluster.workerUrls[0], {
      schema,
      distribution: 'citus',
      retryAttempts: 1,
      retryDelay: 50,
    });
    await expect(unmigrated).rejects.toThrow(DedupQueueConfigurationError);
    await expect(unmigrated).rejects.toThrow(/lacks its migrations .* and none did after 2 attempt\(s\)/);
    expect(await schemaExists(citus.worker(0), schema)).toBe(false);
    expect(await schemaExists(citus.coordinator, schema)).toBe(false);
  });

  it('boots on a worker node while the coordinator instance migrates, then enqueues and drains, woken by NOTIFY', async () => {
    const schema = uniqueSchema('anynode');
    const waiting = boot(
      citus.cluster.workerUrls[0],
      { schema, distribution: 'citus', retryAttempts: 200, retryDelay: 100 },
      [DoublingTasks],
    );
    await boot(citus.cluster.url, { schema, distribution: 'citus', worker: false });
    const app = await waiting;
    const versions = async () =>
      (await citus.coordinator.query(`SELECT count(*)::int AS n FROM "${schema}".schema_migrations`)).rows[0].n;
    const before = await versions();
    const queues = app.get(QueueService);
    const started = Date.now();
    const handles = await Promise.all([1, 2, 3].map((n) => queues.enqueue('tasks', 'DoublingTasks.double', [n])));
    await expect(Promise.all(handles.map((handle) => handle.getResult({ timeoutMs: 20_000 })))).resolves.toEqual([
      2, 4, 6,
    ]);
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(await versions()).toBe(before);
  });

  it('shares a queue between instances on different nodes: one winner per deduplication key', async () => {
    const schema = uniqueSchema('anynode');
    // NOTE: no workers, so that every key stays held during the race (a finished run frees its key).
    const onCoordinator = await boot(citus.cluster.url, { schema, distribution: 'citus', worker: false });
    const onWorkers = await Promise.all(
      citus.cluster.workerUrls.map((url) => boot(url, { schema, distribution: 'citus', worker: false })),
    );
    const instances = [onCoordinator, ...onWorkers].map((module) => module.get(QueueService));
    const keys = ['k1', 'k2', 'k3', 'k4'];
    const attempts = await Promise.allSettled(
      keys.flatMap((key) =>
        instances.map((queues, index) =>
          queues.enqueue('tasks', 'DoublingTasks.double', [index], { deduplicationId: key }),
        ),
      ),
    );
    const won = attempts.filter((attempt) => attempt.status === 'fulfilled');
    const lost = attempts.filter((attempt) => attempt.status === 'rejected');
    expect(won).toHaveLength(keys.length);
    expect(lost).toHaveLength(keys.length * (instances.length - 1));
    for (const attempt of lost) expect(attempt.reason).toBeInstanceOf(QueueDeduplicatedError);
    const { rows } = await citus.coordinator.query(
      `SELECT deduplication_id, count(*)::int AS n FROM "${schema}".workflows GROUP BY 1 ORDER BY 1`,
    );
    expect(rows).toEqual(keys.map((key) => ({ deduplication_id: key, n: 1 })));
  });

  it('recovers the workflow of an instance on a worker node SIGKILLed mid-run, from another node, once', async () => {
    const schema = uniqueSchema('anynode');
    const app = await boot(
      citus.cluster.url,
      { schema, distribution: 'citus', queues: [{ name: 'sigterm' }], worker: false },
      [HoldingTasks],
    );
    for (const table of ['events (seq bigserial, kind text NOT NULL, key text NOT NULL)', 'release (key text)']) {
      await citus.coordinator.query(`CREATE TABLE "${schema}".${table}`);
      await citus.coordinator.query(`SELECT create_reference_table($1)`, [`"${schema}".${table.split(' ')[0]}`]);
    }
    const child: FixtureProcess = spawnFixture('child-worker.ts', 'worker-node-instance', {
      DATABASE_URL: citus.cluster.workerUrls[0],
      SCHEMA: schema,
      DISTRIBUTION: 'citus',
      APPLICATION_NAME: 'worker-node-crash',
    });
    await child.message('ready');
    const handle = await app.get(QueueService).enqueue('sigterm', app.get(HoldingTasks).hold, ['k1']);
    await waitFor(
      async () =>
        (await citus.coordinator.query(`SELECT 1 FROM "${schema}".events WHERE kind = 'started'`)).rowCount === 1,
      { what: 'the instance on the worker node to start the workflow', timeoutMs: 60_000 },
    );
    child.child.kill('SIGKILL');
    await child.ended;
    await boot(
      citus.cluster.workerUrls[1],
      { schema, distribution: 'citus', queues: [{ name: 'sigterm' }], leaseMs: 2000, heartbeatIntervalMs: 300 },
      [HoldingTasks],
    );
    await expect(handle.getResult({ timeoutMs: 30_000 })).resolves.toBe('recovered k1');
    const { rows } = await citus.coordinator.query(
      `SELECT status, recovery_attempts FROM "${schema}".workflows WHERE workflow_id = $1`,
      [handle.workflowId],
    );
    expect(rows).toEqual([{ status: 'SUCCESS', recovery_attempts: 1 }]);
  });

  describe('what Citus 13 does on a worker node', () => {
    it('sends a NOTIFY to its own listeners only', async () => {
      const listener = new Client({ connectionString: citus.cluster.url });
      await listener.connect();
      try {
        const heard: string[] = [];
        listener.on('notification', (message) => heard.push(message.payload ?? ''));
        await listener.query('LISTEN any_node_test');
        await citus.worker(0).query(`SELECT pg_notify('any_node_test', 'from the worker node')`);
        await citus.coordinator.query(`SELECT pg_notify('any_node_test', 'from the coordinator')`);
        await waitFor(() => heard.length > 0);
        await new Promise((resolve) => setTimeout(resolve, 300));
        expect(heard).toEqual(['from the coordinator']);
      } finally {
        await listener.end();
      }
    });

    it('numbers an identity column from its own range, after the rows numbered on the coordinator', async () => {
      const table = `${uniqueSchema('seq')}_t`;
      await citus.coordinator.query(
        `CREATE TABLE public.${table} (queue_name text NOT NULL, name text NOT NULL,
           seq bigint GENERATED BY DEFAULT AS IDENTITY)`,
      );
      await citus.coordinator.query(`SELECT create_distributed_table('public.${table}', 'queue_name')`);
      await citus.coordinator.query(
        `INSERT INTO public.${table} (queue_name, name) VALUES ('q', 'first, coordinator')`,
      );
      await citus.worker(0).query(`INSERT INTO public.${table} (queue_name, name) VALUES ('q', 'second, worker node')`);
      await citus.coordinator.query(
        `INSERT INTO public.${table} (queue_name, name) VALUES ('q', 'third, coordinator')`,
      );
      const { rows } = await citus.coordinator.query<{ name: string; seq: string }>(
        `SELECT name, seq::text FROM public.${table} ORDER BY seq`,
      );
      const [{ groupid }] = (
        await citus.worker(0).query<{ groupid: number }>('SELECT groupid FROM pg_dist_local_group')
      ).rows;
      expect(rows.map((row) => row.name)).toEqual(['first, coordinator', 'third, coordinator', 'second, worker node']);
      expect(BigInt(rows[2].seq) >> 48n).toBe(BigInt(groupid));
      await citus.coordinator.query(`DROP TABLE public.${table}`);
    });

    it('refuses now() in the DO UPDATE SET of an upsert into a Citus local table; accepts EXCLUDED', async () => {
      const table = `${uniqueSchema('local')}_t`;
      await citus.coordinator.query(`CREATE TABLE public.${table} (k text PRIMARY KEY, at timestamptz DEFAULT now())`);
      await citus.coordinator.query(`SELECT citus_add_local_table_to_metadata('public.${table}')`);
      try {
        const upsert = (set: string) =>
          citus
            .worker(0)
            .query(`INSERT INTO public.${table} (k) VALUES ('a') ON CONFLICT (k) DO UPDATE SET at = ${set}`);
        await upsert('excluded.at');
        await expect(upsert('now()')).rejects.toMatchObject({ code: '0A000' });
        await upsert('excluded.at');
        expect((await citus.coordinator.query(`SELECT k FROM public.${table}`)).rows).toEqual([{ k: 'a' }]);
      } finally {
        await citus.coordinator.query(`DROP TABLE public.${table}`);
      }
    });

    it('refuses DDL on a distributed table and distributing a table', async () => {
      const table = `${uniqueSchema('ddl')}_t`;
      await citus.coordinator.query(`CREATE TABLE public.${table} (queue_name text NOT NULL)`);
      await citus.coordinator.query(`SELECT create_distributed_table('public.${table}', 'queue_name')`);
      try {
        await expect(citus.worker(0).query(`ALTER TABLE public.${table} ADD COLUMN x int`)).rejects.toThrow(
          /operation is not allowed on this node/,
        );
        await citus.worker(0).query(`CREATE TABLE public.${table}_here (queue_name text NOT NULL)`);
        await expect(
          citus.worker(0).query(`SELECT create_distributed_table('public.${table}_here', 'queue_name')`),
        ).rejects.toThrow(/operation is not allowed on this node/);
      } finally {
        await citus.worker(0).query(`DROP TABLE IF EXISTS public.${table}_here`);
        await citus.coordinator.query(`DROP TABLE public.${table}`);
      }
    });

    it('keeps advisory locks per node; a reference table row lock excludes across nodes', async () => {
      const key = 36_002;
      const holder = new Client({ connectionString: citus.cluster.workerUrls[0] });
      const other = new Client({ connectionString: citus.cluster.url });
      await holder.connect();
      await other.connect();
      const table = `${uniqueSchema('ref')}_t`;
      try {
        await holder.query('SELECT pg_advisory_lock($1)', [key]);
        expect((await other.query('SELECT pg_try_advisory_lock($1) AS got', [key])).rows[0].got).toBe(true);
        await citus.coordinator.query(`CREATE TABLE public.${table} (name text PRIMARY KEY)`);
        await citus.coordinator.query(`SELECT create_reference_table('public.${table}')`);
        await citus.coordinator.query(`INSERT INTO public.${table} VALUES ('tasks')`);
        await holder.query('BEGIN');
        await holder.query(`SELECT 1 FROM public.${table} WHERE name = 'tasks' FOR UPDATE`);
        await other.query('BEGIN');
        let locked = false;
        const waiting = other
          .query(`SELECT 1 FROM public.${table} WHERE name = 'tasks' FOR UPDATE`)
          .then(() => (locked = true));
        await new Promise((resolve) => setTimeout(resolve, 500));
        expect(locked).toBe(false);
        await holder.query('COMMIT');
        await waiting;
        expect(locked).toBe(true);
        await other.query('COMMIT');
      } finally {
        await holder.end();
        await other.end();
        await citus.coordinator.query(`DROP TABLE IF EXISTS public.${table}`);
      }
    });
  });
});
