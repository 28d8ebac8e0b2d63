import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import type { Migration } from './migrations';
import type { QueueDatabase } from './queue-database';
import { isConnectionFailure } from './sql-errors';

type Query = <R = Record<string, unknown>>(sql: string, params?: unknown[]) => Promise<R[]>;

/**
 * Brings the module's schema up to the newest migration. Safe when many processes start at once: each migration
 * runs in a transaction that first takes a transaction-scoped advisory lock keyed by the schema, re-reads what is
 * applied, and commits the migration together with its bookkeeping row. NOTE: transaction-scoped, so that the lock
 * also holds behind a transaction pooler (a session lock would stay on a server connection others reuse).
 * Returns the versions this call applied.
 */
export async function runMigrations(database: QueueDatabase, migrations: readonly Migration[]): Promise<number[]> {
  const applied: number[] = [];
  for (;;) {
    const version = await database.transaction((query) => applyNext(query, database, migrations));
    if (version === undefined) return applied;
    applied.push(version);
  }
}

/** Applies the first migration not yet applied; undefined when there is none. */
async function applyNext(query: Query, database: QueueDatabase, migrations: readonly Migration[]): Promise<number | undefined> {
  const schema = database.schemaSql;
  await query('SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))', ['nest-dedup-queue', database.schema]);
  await query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
  await query(`
    CREATE TABLE IF NOT EXISTS ${schema}.schema_migrations (
      version    integer PRIMARY KEY,
      name       text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`);
  const rows = await query<{ version: number }>(`SELECT version FROM ${schema}.schema_migrations`);
  const appliedVersions = new Set(rows.map((row) => row.version));
  assertNotNewerThanCode(appliedVersions, migrations, database.schema);
  const next = migrations.find((migration) => !appliedVersions.has(migration.version));
  if (!next) return undefined;
  try {
    await query(next.up(schema));
  } catch (error) {
    if (isConnectionFailure(error)) throw error;
    throw new DedupQueueConfigurationError(
      `Migration ${next.version} (${next.name}) of schema "${database.schema}" failed: ${(error as Error).message}`,
    );
  }
  await query(`INSERT INTO ${schema}.schema_migrations (version, name) VALUES ($1, $2)`, [next.version, next.name]);
  return next.version;
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
