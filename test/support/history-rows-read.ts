import type { Pool } from 'pg';

/** The history's partitions of `schema` that hold rows (a scan of an empty one, a day to come, costs nothing). */
export async function populatedHistoryPartitions(pool: Pool, schema: string): Promise<Set<string>> {
  const { rows } = await pool.query<{ relname: string }>(
    `SELECT relname FROM pg_class WHERE relnamespace = $1::regnamespace AND relkind = 'r' AND reltuples > 0
       AND relname LIKE 'workflow_history%'`,
    [schema],
  );
  return new Set(rows.map((row) => row.relname));
}

/** How many rows of the populated history partitions `text` reads, from its EXPLAIN ANALYZE (rows kept and removed). */
export async function historyRowsRead(
  pool: Pool,
  text: string,
  values: unknown[],
  populated: Set<string>,
): Promise<number> {
  const client = await pool.connect();
  try {
    const { rows } = await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(
      `EXPLAIN (ANALYZE, FORMAT JSON) ${text}`,
      values,
    );
    const read = (node: PlanNode): number =>
      (populated.has(node['Relation Name'] ?? '') && /Scan/.test(node['Node Type'])
        ? ((node['Actual Rows'] ?? 0) +
            (node['Rows Removed by Filter'] ?? 0) +
            (node['Rows Removed by Index Recheck'] ?? 0)) *
          (node['Actual Loops'] ?? 1)
        : 0) + (node.Plans ?? []).reduce((sum, child) => sum + read(child), 0);
    return read(rows[0]['QUERY PLAN'][0].Plan);
  } finally {
    client.release();
  }
}

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  Plans?: PlanNode[];
}
