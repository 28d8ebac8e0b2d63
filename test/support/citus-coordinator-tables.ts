import type { Pool } from 'pg';

/**
 * The tables the coordinator keeps the rows of, Citus local tables from 1.2 on (docs/citus.md, "Worker nodes").
 * Written out here rather than taken from the library, so that a table the library stops converting shows.
 */
export const COORDINATOR_TABLES: readonly string[] = [
  'executors',
  'registered_workflows',
  'schedules',
  'schema_migrations',
  'input_limits',
];

/** The coordinator tables of `schema` that are Citus local tables (in `pg_dist_partition`, method `n`), sorted. */
export async function citusLocalTables(coordinator: Pool, schema: string): Promise<string[]> {
  const { rows } = await coordinator.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_dist_partition AS p JOIN pg_class AS c ON c.oid = p.logicalrelid
     WHERE c.relnamespace = $1::regnamespace AND p.partmethod = 'n' AND c.relname = ANY($2) ORDER BY 1`,
    [schema, COORDINATOR_TABLES],
  );
  return rows.map((row) => row.name);
}
