import type { Pool } from 'pg';

/**
 * How many statements on a schema's active table (`workflow_queue`) wait for a lock now: an enqueue of a key that an
 * open transaction holds, or an insert that waits on a row being moved to the history. `applicationName` narrows it
 * to the connections of that `application_name` (a LIKE pattern).
 */
export async function activeTableLockWaits(pool: Pool, schema: string, applicationName = '%'): Promise<number> {
  const { rows } = await pool.query<{ waiting: number }>(
    `SELECT count(*)::int AS waiting FROM pg_stat_activity
     WHERE wait_event_type = 'Lock' AND application_name LIKE $1 AND query LIKE $2`,
    [applicationName, `%"${schema}".workflow_queue%`],
  );
  return rows[0].waiting;
}
