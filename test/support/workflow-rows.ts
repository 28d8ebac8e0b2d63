import type { Pool, PoolClient } from 'pg';

type Table = 'workflow_queue' | 'workflow_history';

/**
 * Moves a workflow's row between the active table and the history by hand, as a test's stand-in for what the module
 * does (a finish, or a row put back to run): the columns both tables have, by name, since each has columns of its own.
 */
export async function moveWorkflowRow(
  db: Pool | PoolClient,
  schema: string,
  workflowId: string,
  from: Table,
  to: Table,
): Promise<void> {
  const { rows } = await db.query<{ name: string }>(
    `SELECT quote_ident(column_name) AS name FROM information_schema.columns
     WHERE table_schema = $1 AND table_name = $2
       AND column_name IN (SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $3)
     ORDER BY ordinal_position`,
    [schema, to, from],
  );
  const columns = rows.map(({ name }) => name).join(', ');
  await db.query(
    `WITH moved AS (DELETE FROM "${schema}".${from} WHERE workflow_id = $1 RETURNING *)
     INSERT INTO "${schema}".${to} (${columns}) SELECT ${columns} FROM moved`,
    [workflowId],
  );
}
