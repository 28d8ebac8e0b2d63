import type { Logger } from '@nestjs/common';
import { DedupQueueConfigurationError } from '../../errors/dedup-queue-configuration.error';
import type { Migration } from './migration.interface';
import type { Query, QueueDatabase } from '../connection/queue-database';
import { lockSchema } from '../connection/schema-lock';
import { isConnectionFailure } from '../connection/sql-errors';
import { ModuleLogger } from '../../utils/module-logger';

/** What one transaction of the runner did: the version it applied, or none, and the newer versions it found. */
interface MigrationStep {
  applied?: number;
  newer: number[];
}

/**
 * Brings the module's schema up to the newest migration. Safe when many processes start at once: each migration
 * runs in a transaction that first takes a transaction-scoped advisory lock keyed by the schema, re-reads what is
 * applied, and commits the migration together with its bookkeeping row. NOTE: transaction-scoped, so that the lock
 * also holds behind a transaction pooler (a session lock would stay on a server connection others reuse).
 *
 * A schema that a newer release migrated further (a rolling deploy, old and new processes side by side) is used as
 * it is, with one warning: migrations are backward compatible with the previous minor. Only a migration marked
 * `breaking` (a new major) makes older processes refuse to start.
 * Returns the versions this call applied.
 */
export async function runMigrations(
  database: QueueDatabase,
  migrations: readonly Migration[],
  logger: Pick<Logger, 'warn'> = new ModuleLogger('DedupQueueModule'),
): Promise<number[]> {
  const applied: number[] = [];
  for (;;) {
    const step = await database.transaction((query) => applyNext(query, database, migrations));
    if (step.applied !== undefined) {
      applied.push(step.applied);
      continue;
    }
    if (step.newer.length > 0) logger.warn(newerSchemaWarning(database.schema, step.newer, migrations));
    return applied;
  }
}

/**
 * Without migrating: the versions of `migrations` the schema lacks (none when it is up to date). A newer schema is
 * used as `runMigrations` uses it: refused if a newer migration is breaking, else with one warning. For a process
 * that must not run DDL (an instance on a Citus worker node); the schema's `schema_migrations` must exist.
 */
export async function missingMigrations(
  database: QueueDatabase,
  migrations: readonly Migration[],
  logger: Pick<Logger, 'warn'> = new ModuleLogger('DedupQueueModule'),
): Promise<number[]> {
  const rows = await database.query<{ version: number; breaking: boolean }>(
    appliedMigrationsSql(database.schemaSql),
    [],
    {
      idempotent: true,
    },
  );
  const known = new Set(migrations.map((migration) => migration.version));
  const newer = rows.filter((row) => !known.has(row.version));
  assertCompatible(newer, database.schema);
  const applied = new Set(rows.map((row) => row.version));
  const missing = migrations.filter((migration) => !applied.has(migration.version)).map((m) => m.version);
  if (missing.length === 0 && newer.length > 0) {
    logger.warn(
      newerSchemaWarning(
        database.schema,
        newer.map((row) => row.version),
        migrations,
      ),
    );
  }
  return missing;
}

/**
 * The applied versions, each with whether it is breaking. NOTE: read through to_jsonb, so that a table made before
 * the `breaking` column existed needs no ALTER here (an application's role may use the schema without owning it);
 * the column is added when a migration applies.
 */
function appliedMigrationsSql(schema: string): string {
  return `SELECT version, coalesce((to_jsonb(m) ->> 'breaking')::boolean, false) AS breaking
          FROM ${schema}.schema_migrations m ORDER BY version`;
}

/** Applies the first migration not yet applied, unless the schema is newer than the code. */
async function applyNext(
  query: Query,
  database: QueueDatabase,
  migrations: readonly Migration[],
): Promise<MigrationStep> {
  const schema = database.schemaSql;
  await lockSchema(query, database.schema);
  await query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
  await query(`
    CREATE TABLE IF NOT EXISTS ${schema}.schema_migrations (
      version    integer PRIMARY KEY,
      name       text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now(),
      breaking   boolean NOT NULL DEFAULT false
    )`);
  const rows = await query<{ version: number; breaking: boolean }>(appliedMigrationsSql(schema));
  const known = new Set(migrations.map((migration) => migration.version));
  const newer = rows.filter((row) => !known.has(row.version));
  assertCompatible(newer, database.schema);
  const appliedVersions = new Set(rows.map((row) => row.version));
  const next = migrations.find((migration) => !appliedVersions.has(migration.version));
  if (!next) return { newer: newer.map((row) => row.version) };
  if (newer.length > 0) {
    throw new DedupQueueConfigurationError(
      `Schema "${database.schema}" has migrations ${newer.map((row) => row.version).join(', ')} that this version ` +
        `of nest-dedup-queue does not know, yet lacks its migration ${next.version} (${next.name}): it was ` +
        `migrated by a release that is not a successor of this one`,
    );
  }
  try {
    for (const command of [next.up(schema)].flat()) await query(command);
  } catch (error) {
    if (isConnectionFailure(error)) throw error;
    throw new DedupQueueConfigurationError(
      `Migration ${next.version} (${next.name}) of schema "${database.schema}" failed: ${(error as Error).message}`,
    );
  }
  await query(
    `ALTER TABLE ${schema}.schema_migrations ADD COLUMN IF NOT EXISTS breaking boolean NOT NULL DEFAULT false`,
  );
  await query(`INSERT INTO ${schema}.schema_migrations (version, name, breaking) VALUES ($1, $2, $3)`, [
    next.version,
    next.name,
    next.breaking === true,
  ]);
  return { applied: next.version, newer: [] };
}

/** A newer release's migrations are fine unless one of them is breaking (a new major): then this process stops. */
function assertCompatible(newer: readonly { version: number; breaking: boolean }[], schema: string): void {
  const breaking = newer.filter((row) => row.breaking).map((row) => row.version);
  if (breaking.length > 0) {
    throw new DedupQueueConfigurationError(
      `Schema "${schema}" has migration ${breaking.join(', ')} of a newer major version of nest-dedup-queue, which ` +
        `this version cannot run against: upgrade nest-dedup-queue in this application`,
    );
  }
}

function newerSchemaWarning(schema: string, newer: readonly number[], migrations: readonly Migration[]): string {
  const knows = Math.max(0, ...migrations.map((migration) => migration.version));
  return (
    `Schema "${schema}" is at migration ${Math.max(...newer)}, this version of nest-dedup-queue knows migrations up ` +
    `to ${knows}: running against it (migrations stay compatible with the previous minor); upgrade this application`
  );
}
