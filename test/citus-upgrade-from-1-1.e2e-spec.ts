import { Test } from '@nestjs/testing';
import { DedupQueueModule } from 'nest-dedup-queue';
import { Pool } from 'pg';
import { spawnFixture, killFixtures } from './fixtures/child-harness';
import { RELEASE_1_1, buildPreviousRelease, describeWithPreviousRelease } from './support/previous-release';
import { useCitusCluster } from './support/citus-suite';
import { COORDINATOR_TABLES, citusLocalTables } from './support/citus-coordinator-tables';
import { uniqueSchema } from './support/database';
import { describeWithTools } from './support/system-tools';

/**
 * A Citus cluster of release 1.1 (built from git; its coordinator tables plain tables) upgraded in place: a
 * coordinator instance's boot makes them Citus local tables, keeping every row, which a worker node then reads.
 * Apart from citus-any-node because it needs the release from git history (the NestJS 12 pass's copy has none).
 */
describeWithTools(['postgres-15', 'citus'], 'Citus: the upgrade of a 1.1 cluster', () => {
  describeWithPreviousRelease(
    'the coordinator tables of 1.1 made Citus local tables',
    () => {
      const citus = useCitusCluster({ beforeClose: killFixtures });

      async function boot(url: string, schema: string) {
        const module = await Test.createTestingModule({
          imports: [
            DedupQueueModule.forRoot({
              connection: { url },
              queues: [{ name: 'tasks' }],
              retryAttempts: 0,
              pollIntervalMs: 60_000,
              schema,
              distribution: 'citus',
              worker: false,
            }),
          ],
        }).compile();
        citus.closeAfter(module);
        await module.init();
        return module;
      }

      it("converts a 1.1 cluster's plain coordinator tables in place at the coordinator instance's boot", async () => {
        const schema = uniqueSchema('anynode');
        const release = buildPreviousRelease(RELEASE_1_1.commit);
        const old = spawnFixture('child-previous-release.ts', 'release-1.1', {
          PREVIOUS_RELEASE_DIR: release,
          DATABASE_URL: citus.cluster.url,
          DISTRIBUTION: 'citus',
          SCHEMA: schema,
          EXECUTOR: 'release-1.1',
          MODE: 'boot',
        });
        await old.message('booted');
        await old.ended;
        await citus.coordinator.query(
          `INSERT INTO "${schema}".executors (executor_id, hostname, pid) VALUES ('old', 'h', 1)`,
        );
        await citus.coordinator.query(
          `INSERT INTO "${schema}".schedules (name, source, cron, workflow_name, queue_name, catch_up, catch_up_limit)
       VALUES ('kept', 'runtime', '0 0 1 1 *', 'UpgradeTasks.record', 'parked', 'none', 1)`,
        );
        expect(await citusLocalTables(citus.coordinator, schema)).toEqual([]);
        await expect(citus.worker(0).query(`SELECT 1 FROM "${schema}".executors`)).rejects.toThrow(/does not exist/);
        const rows = async (pool: Pool) => {
          const all: { table_name: string; row: unknown }[] = [];
          for (const table of COORDINATOR_TABLES) {
            const { rows: found } = await pool.query<{ row: unknown }>(
              `SELECT to_jsonb(t) AS row FROM "${schema}".${table} AS t ORDER BY 1`,
            );
            all.push(...found.map(({ row }) => ({ table_name: table, row })));
          }
          return all;
        };
        const before = await rows(citus.coordinator);
        expect(before.filter((row) => row.table_name === 'registered_workflows').length).toBeGreaterThan(0);
        await boot(citus.cluster.url, schema);
        expect(await citusLocalTables(citus.coordinator, schema)).toEqual([...COORDINATOR_TABLES].sort());
        const after = await rows(citus.worker(0));
        const migrations = (list: typeof before) => list.filter((row) => row.table_name === 'schema_migrations');
        expect(after.filter((row) => row.table_name !== 'schema_migrations')).toEqual(
          before.filter((row) => row.table_name !== 'schema_migrations'),
        );
        expect(migrations(after)).toEqual(expect.arrayContaining(migrations(before)));
        expect(migrations(after).length).toBeGreaterThan(migrations(before).length);
      }, 300_000);
    },
    RELEASE_1_1,
  );
});
