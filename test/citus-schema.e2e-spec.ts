import { Test } from '@nestjs/testing';
import {
  DedupQueueConfigurationError,
  DedupQueueModule,
  DedupQueueModuleOptions,
  QueueService,
} from 'nest-dedup-queue';
import { HistoryPartitions, QueueDatabase } from 'nest-dedup-queue/testing';
import { DataSource } from 'typeorm';
import { DoublingTasks } from './fixtures/doubling-tasks';
import { useCitusCluster } from './support/citus-suite';
import { databaseUrl, dropSchema, testPool, uniqueSchema } from './support/database';
import { describeWithTools } from './support/system-tools';
import { waitFor } from './support/wait-for';

/**
 * `forRoot({ distribution: 'citus' })` at boot: the option is refused without the extension; on a cluster the
 * per-workflow tables become distributed by queue and co-located, the queue settings a reference table, the rest
 * stays on the coordinator as Citus local tables (readable from every node); a second boot changes nothing; a schema that ran on one node (with rows) is distributed
 * in place, its rows kept; the daily partitions made later come out distributed.
 */
describeWithTools(['postgres-15', 'citus'], 'Citus: the distributed schema', () => {
  const citus = useCitusCluster();

  async function boot(options: Partial<DedupQueueModuleOptions> & { schema: string }, url = citus.cluster.url) {
    const module = await Test.createTestingModule({
      imports: [
        DedupQueueModule.forRoot({
          connection: { url },
          queues: [{ name: 'tasks' }, { name: 'other' }],
          retryAttempts: 0,
          ...options,
        }),
      ],
      providers: [DoublingTasks],
    }).compile();
    citus.closeAfter(module);
    await module.init();
    return module;
  }

  async function placement(schema: string): Promise<Record<string, string>> {
    const { rows } = await citus.coordinator.query<{
      table: string;
      kind: string;
      replication: string;
      colocated: boolean;
    }>(
      `SELECT c.relname AS table, p.partmethod AS kind, p.repmodel AS replication,
              p.colocationid = (SELECT colocationid FROM pg_dist_partition
                                WHERE logicalrelid = $2::regclass) AS colocated
       FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
       LEFT JOIN pg_dist_partition AS p ON p.logicalrelid = c.oid
       WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND c.relname !~ '_p[0-9]{8}$'`,
      [schema, `"${schema}".workflow_queue`],
    );
    return Object.fromEntries(
      rows.map((row) => [
        row.table,
        row.kind === 'h'
          ? row.colocated
            ? 'distributed, co-located'
            : 'distributed'
          : row.kind === 'n' && row.replication === 't'
            ? 'reference'
            : row.kind === 'n'
              ? 'coordinator, Citus local'
              : 'coordinator',
      ]),
    );
  }

  it('refuses the option on a database without Citus, naming the extension', async () => {
    const local = testPool();
    const schema = uniqueSchema('nocitus');
    try {
      const booting = boot({ schema, distribution: 'citus' }, databaseUrl());
      await expect(booting).rejects.toThrow(DedupQueueConfigurationError);
      await expect(booting).rejects.toThrow(/needs the Citus extension/);
      const { rows } = await local.query(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [schema]);
      expect(rows).toEqual([]);
    } finally {
      await dropSchema(local, schema);
      await local.end();
    }
  });

  it('refuses an unknown distribution before connecting', async () => {
    await expect(boot({ schema: 'unused', distribution: 'sharded' as unknown as 'citus' })).rejects.toThrow(
      /`distribution` must be 'single'/,
    );
  });

  it('distributes the per-workflow tables by queue, co-located; queue settings everywhere; the rest on the coordinator', async () => {
    const schema = uniqueSchema('dist');
    const module = await boot({ schema, distribution: 'citus' });
    expect(await placement(schema)).toEqual({
      workflow_queue: 'distributed, co-located',
      workflow_ready: 'distributed, co-located',
      workflow_history: 'distributed, co-located',
      workflow_history_legacy: 'distributed, co-located',
      steps: 'distributed, co-located',
      steps_legacy: 'distributed, co-located',
      steps_before: 'distributed, co-located',
      workflow_events: 'distributed, co-located',
      workflow_messages: 'distributed, co-located',
      workflow_messages_before: 'distributed, co-located',
      workflow_streams: 'distributed, co-located',
      workflow_streams_before: 'distributed, co-located',
      event_waits: 'distributed, co-located',
      executor_leases: 'distributed, co-located',
      queue_starts: 'distributed, co-located',
      queues: 'reference',
      executors: 'coordinator, Citus local',
      registered_workflows: 'coordinator, Citus local',
      schedules: 'coordinator, Citus local',
      schema_migrations: 'coordinator, Citus local',
      input_limits: 'coordinator, Citus local',
    });
    const { rows: columns } = await citus.coordinator.query(
      `SELECT DISTINCT column_to_column_name(logicalrelid, partkey) AS column FROM pg_dist_partition
       WHERE logicalrelid::text LIKE $1 AND partmethod = 'h'`,
      [`${schema}.%`],
    );
    expect(columns).toEqual([{ column: 'queue_name' }]);

    const checkpoint = `"${schema}".record_checkpoint(text, text, text, integer, integer, text, json, json, double precision)`;
    for (const node of [citus.coordinator, citus.worker(0)]) {
      const { rows: functions } = await node.query(
        `SELECT p.proconfig, has_function_privilege('public', p.oid, 'EXECUTE') AS public_may_call,
                d.distribution_argument_index IS NOT NULL AS distributed
         FROM pg_proc p JOIN pg_catalog.pg_dist_object d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
         WHERE p.oid = to_regprocedure($1)`,
        [checkpoint],
      );
      expect(functions).toEqual([
        { proconfig: ['search_path=pg_catalog, pg_temp'], public_may_call: false, distributed: true },
      ]);
    }

    const handle = await module.get(QueueService).enqueue('tasks', 'DoublingTasks.double', [21]);
    await expect(handle.getResult({ timeoutMs: 20_000 })).resolves.toBe(42);
    await module.close();
  });

  it('does nothing on a second boot', async () => {
    const schema = uniqueSchema('again');
    await (await boot({ schema, distribution: 'citus', worker: false })).close();
    const before = await citus.coordinator.query(
      `SELECT logicalrelid::text, colocationid FROM pg_dist_partition ORDER BY 1`,
    );
    const shards = await citus.coordinator.query(`SELECT count(*)::int AS n FROM pg_dist_shard`);
    await (await boot({ schema, distribution: 'citus', worker: false })).close();
    expect(
      (await citus.coordinator.query(`SELECT logicalrelid::text, colocationid FROM pg_dist_partition ORDER BY 1`)).rows,
    ).toEqual(before.rows);
    expect((await citus.coordinator.query(`SELECT count(*)::int AS n FROM pg_dist_shard`)).rows).toEqual(shards.rows);
  });

  it('distributes in place a schema that ran on one node, keeping its workflows, history and steps', async () => {
    const schema = uniqueSchema('upgrade');
    const single = await boot({ schema, worker: false });
    const queues = single.get(QueueService);
    const finished = await queues.enqueue('tasks', 'DoublingTasks.double', [1], { deduplicationId: 'done' });
    await single.close();
    const worker = await boot({ schema, queues: [{ name: 'tasks' }, { name: 'other' }] });
    const service0 = worker.get(QueueService);
    await waitFor(
      async () => (await service0.retrieve(finished.workflowId).then((h) => h.getStatus())).status === 'SUCCESS',
    );
    const waiting = await service0.enqueue('other', 'DoublingTasks.double', [3], {
      deduplicationId: 'held',
      delayMs: 3_600_000,
    });
    await worker.close();
    const count = async () =>
      (await citus.coordinator.query(`SELECT workflow_id, status FROM "${schema}".workflows ORDER BY workflow_id`))
        .rows;
    const before = await count();
    expect(before).toHaveLength(2);

    const distributed = await boot({ schema, distribution: 'citus', worker: false });
    expect((await placement(schema)).workflow_queue).toBe('distributed, co-located');
    expect(await count()).toEqual(before);
    const service = distributed.get(QueueService);
    await expect((await service.retrieve(finished.workflowId)).getResult()).resolves.toBe(2);
    expect(await (await service.retrieve(waiting.workflowId)).getStatus()).toMatchObject({ status: 'DELAYED' });
    const steps = await citus.coordinator.query(`SELECT count(*)::int AS n FROM "${schema}".steps`);
    expect(steps.rows[0].n).toBe(0);
    // The key is still held on the cluster: a duplicate is told its holder.
    await expect(
      service.enqueue('other', 'DoublingTasks.double', [4], { deduplicationId: 'held' }),
    ).rejects.toMatchObject({ name: 'QueueDeduplicatedError' });
    // The coordinator's local copies were emptied once the rows were on the shards.
    const { rows } = await citus.coordinator.query(`SELECT pg_relation_size($1)::int AS bytes`, [
      `"${schema}".workflow_queue`,
    ]);
    expect(rows[0].bytes).toBe(0);
  });

  it('creates daily partitions that come out distributed', async () => {
    const schema = uniqueSchema('parts');
    await (await boot({ schema, distribution: 'citus', worker: false })).close();
    const dataSource = await new DataSource({ type: 'postgres', url: citus.cluster.url }).initialize();
    try {
      const created = await new HistoryPartitions(new QueueDatabase(dataSource, schema, false)).extend(10);
      expect(created.length).toBeGreaterThan(0);
      const { rows } = await citus.coordinator.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_class AS c JOIN pg_namespace AS s ON s.oid = c.relnamespace
         WHERE s.nspname = $1 AND c.relname ~ '_p[0-9]{8}$'
           AND NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = c.oid)`,
        [schema],
      );
      expect(rows[0].n).toBe(0);
    } finally {
      await dataSource.destroy();
    }
  });
});
