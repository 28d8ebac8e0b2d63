import { Test, TestingModule } from '@nestjs/testing';
import {
  DedupQueueConfigurationError,
  DedupQueueModule,
  DedupQueueModuleOptions,
  QueueService,
} from 'nest-dedup-queue';
import { Client, Pool } from 'pg';
import { DoublingTasks } from './fixtures/doubling-tasks';
import { CitusCluster, startCitusCluster } from './support/citus-cluster';
import { testPool, uniqueSchema } from './support/database';
import { describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

/**
 * An application instance pointed at a worker node of a Citus cluster instead of its coordinator is refused at boot,
 * with `distribution: 'citus'` or without, before anything is written, naming the coordinator; an instance on the
 * coordinator is not disturbed. Then the behaviours of Citus 13 that the refusal rests on (docs/citus.md, "Worker
 * nodes"), so that a Citus release that changes one shows here: a coordinator table cannot be read from a worker
 * node, a NOTIFY sent through a worker node is not heard on the coordinator, an identity column numbers a row
 * inserted through a worker node from that node's range (after the coordinator's), an advisory lock is per node; a
 * reference table's row lock (the claim's lock on a queue with global limits) does exclude across nodes.
 */
describeWithTools(['postgres-15', 'citus'], 'Citus: an instance on a worker node', () => {
  let cluster: CitusCluster;
  let coordinator: Pool;
  let worker: Pool;
  const modules: TestingModule[] = [];

  beforeAll(async () => {
    cluster = await startCitusCluster();
    coordinator = testPool(cluster.url);
    worker = testPool(cluster.workerUrls[0]);
  });

  afterAll(async () => {
    for (const module of modules) await module.close().catch(() => undefined);
    await coordinator?.end();
    await worker?.end();
    await cluster?.stop();
  });

  async function boot(url: string, options: Partial<DedupQueueModuleOptions> & { schema: string }) {
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
      providers: [DoublingTasks],
    }).compile();
    modules.push(module);
    await module.init();
    return module;
  }

  async function schemaExists(pool: Pool, schema: string): Promise<boolean> {
    const { rows } = await pool.query(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [schema]);
    return rows.length > 0;
  }

  const refusal = (group: number) =>
    new RegExp(
      `is a worker node of a Citus cluster \\(group ${group}\\)\\. Connect to its coordinator, at ` +
        `127\\.0\\.0\\.1:${cluster.coordinator.port} as the cluster names it`,
    );

  it('refuses a worker node before the coordinator migrated, naming the coordinator, and writes nothing', async () => {
    const schema = uniqueSchema('anynode');
    const [{ groupid }] = (await worker.query<{ groupid: number }>('SELECT groupid FROM pg_dist_local_group')).rows;
    expect(groupid).toBeGreaterThan(0);
    for (const distribution of ['citus', undefined] as const) {
      const booting = boot(cluster.workerUrls[0], { schema, distribution });
      await expect(booting).rejects.toThrow(DedupQueueConfigurationError);
      await expect(booting).rejects.toThrow(refusal(groupid));
    }
    expect(await schemaExists(worker, schema)).toBe(false);
    expect(await schemaExists(coordinator, schema)).toBe(false);
  });

  it('refuses a worker node of a migrated schema while an instance on the coordinator runs on, woken at once', async () => {
    const schema = uniqueSchema('anynode');
    const app = await boot(cluster.url, { schema, distribution: 'citus' });
    const versions = async () =>
      (await coordinator.query(`SELECT max(version) AS v FROM "${schema}".schema_migrations`)).rows[0].v;
    const before = await versions();
    const [{ groupid }] = (await worker.query<{ groupid: number }>('SELECT groupid FROM pg_dist_local_group')).rows;
    await expect(boot(cluster.workerUrls[0], { schema, distribution: 'citus' })).rejects.toThrow(refusal(groupid));
    expect(await versions()).toBe(before);
    const handle = await app.get(QueueService).enqueue('tasks', 'DoublingTasks.double', [21]);
    await expect(handle.getResult({ timeoutMs: 20_000 })).resolves.toBe(42);
  });

  describe('what Citus 13 does on a worker node', () => {
    it('cannot read a plain table of the coordinator (the executors, schedules, migrations)', async () => {
      const schema = uniqueSchema('anynode');
      await boot(cluster.url, { schema, distribution: 'citus' });
      await expect(worker.query(`SELECT 1 FROM "${schema}".executors`)).rejects.toThrow(/does not exist/);
      await expect(worker.query(`SELECT 1 FROM "${schema}".workflow_queue LIMIT 1`)).resolves.toBeDefined();
    });

    it('sends a NOTIFY to its own listeners only', async () => {
      const listener = new Client({ connectionString: cluster.url });
      await listener.connect();
      try {
        const heard: string[] = [];
        listener.on('notification', (message) => heard.push(message.payload ?? ''));
        await listener.query('LISTEN any_node_test');
        await worker.query(`SELECT pg_notify('any_node_test', 'from the worker node')`);
        await coordinator.query(`SELECT pg_notify('any_node_test', 'from the coordinator')`);
        await waitFor(() => heard.length > 0);
        await new Promise((resolve) => setTimeout(resolve, 300));
        expect(heard).toEqual(['from the coordinator']);
      } finally {
        await listener.end();
      }
    });

    it('numbers an identity column from its own range, after the rows numbered on the coordinator', async () => {
      const table = `${uniqueSchema('seq')}_t`;
      await coordinator.query(
        `CREATE TABLE public.${table} (queue_name text NOT NULL, name text NOT NULL,
           seq bigint GENERATED BY DEFAULT AS IDENTITY)`,
      );
      await coordinator.query(`SELECT create_distributed_table('public.${table}', 'queue_name')`);
      await coordinator.query(`INSERT INTO public.${table} (queue_name, name) VALUES ('q', 'first, coordinator')`);
      await worker.query(`INSERT INTO public.${table} (queue_name, name) VALUES ('q', 'second, worker node')`);
      await coordinator.query(`INSERT INTO public.${table} (queue_name, name) VALUES ('q', 'third, coordinator')`);
      const { rows } = await coordinator.query<{ name: string; seq: string }>(
        `SELECT name, seq::text FROM public.${table} ORDER BY seq`,
      );
      const [{ groupid }] = (await worker.query<{ groupid: number }>('SELECT groupid FROM pg_dist_local_group')).rows;
      expect(rows.map((row) => row.name)).toEqual(['first, coordinator', 'third, coordinator', 'second, worker node']);
      expect(BigInt(rows[2].seq) >> 48n).toBe(BigInt(groupid));
      await coordinator.query(`DROP TABLE public.${table}`);
    });

    it('keeps advisory locks per node; a reference table row lock excludes across nodes', async () => {
      const key = 36_002;
      const holder = new Client({ connectionString: cluster.workerUrls[0] });
      const other = new Client({ connectionString: cluster.url });
      await holder.connect();
      await other.connect();
      const table = `${uniqueSchema('ref')}_t`;
      try {
        await holder.query('SELECT pg_advisory_lock($1)', [key]);
        expect((await other.query('SELECT pg_try_advisory_lock($1) AS got', [key])).rows[0].got).toBe(true);
        await coordinator.query(`CREATE TABLE public.${table} (name text PRIMARY KEY)`);
        await coordinator.query(`SELECT create_reference_table('public.${table}')`);
        await coordinator.query(`INSERT INTO public.${table} VALUES ('tasks')`);
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
        await coordinator.query(`DROP TABLE IF EXISTS public.${table}`);
      }
    });
  });
});
