import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import type { Migration } from './migrations';
import type { QueueDatabase } from './queue-database';

/**
 * Brings the module's schema up to the newest migration. Safe when many processes start at once: they queue on a
 * session advisory lock keyed by the schema, and each migration commits together with its bookkeeping row.
 * Returns the versions this call applied.
 */
export async function runMigrations(database: QueueDatabase, migrations: readonly Migration[]): Promise<number[]> {
  const schema = database.schemaSql;
  const { client, release } = await database.connect();
  const lockKey = [`nest-dedup-queue`, database.schema];
  let broken: Error | undefined;
  try {
    await client.query('SELECT pg_advisory_lock(hashtext($1), hashtext($2))', lockKey);
    try {
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
      await client.query(`
        CREATE TABLE IF NOT EXISTS ${schema}.schema_migrations (
          version    integer PRIMARY KEY,
          name       text NOT NULL,
          applied_at timestamptz NOT NULL DEFAULT now()
        )`);
      const { rows } = await client.query<{ version: number }>(`SELECT version FROM ${schema}.schema_migrations`);
      const appliedVersions = new Set(rows.map((row) => row.version));
      assertNotNewerThanCode(appliedVersions, migrations, database.schema);
      const applied: number[] = [];
      for (const migration of migrations) {
        if (appliedVersions.has(migration.version)) {
          continue;
        }
        await client.query('BEGIN');
        try {
          await client.query(migration.up(schema));
          await client.query(`INSERT INTO ${schema}.schema_migrations (version, name) VALUES ($1, $2)`, [
            migration.version,
            migration.name,
          ]);
          await client.query('COMMIT');
        } catch (error) {
          await client.query('ROLLBACK');
          throw new DedupQueueConfigurationError(
            `Migration ${migration.version} (${migration.name}) of schema "${database.schema}" failed: ${(error as Error).message}`,
          );
        }
        applied.push(migration.version);
      }
      return applied;
    } finally {
      await client.query('SELECT pg_advisory_unlock(hashtext($1), hashtext($2))', lockKey);
    }
  } catch (error) {
    broken = error instanceof DedupQueueConfigurationError ? undefined : (error as Error);
    throw error;
  } finally {
    release(broken);
  }
}

function assertNotNewerThanCode(applied: Set<number>, migrations: readonly Migration[], schema: string): void {
  const known = new Set(migrations.map((migration) => migration.version));
  const unknown = [...applied].filter((version) => !known.has(version)).sort((a, b) => a - b);
  if (unknown.length > 0) {
    throw new DedupQueueConfigurationError(
      `Schema "${schema}" has migrations ${unknown.join(', ')} that this version of nest-dedup-queue does not know; ` +
        `it was migrated by a newer version: upgrade nest-dedup-queue in this application`,
    );
  }
}
