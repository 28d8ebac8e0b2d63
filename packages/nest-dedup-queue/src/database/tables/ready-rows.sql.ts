import type { Query, QueueDatabase, QueryOptions } from '../connection/queue-database';
import { STATUS_SQL } from './workflow-status.sql';

/**
 * The ready rows (migration 025): a row of `workflow_ready` per ENQUEUED workflow, due or delayed, with its queue,
 * priority, `seq`, workflow ID and partition key. A claim picks its workflows there, so that it changes no indexed
 * value of the active row and its update is HOT (no index of the active table names the status, the executor or
 * the start). Every statement that moves a workflow into ENQUEUED writes its ready row, and every one that moves it
 * out (a claim, a cancel, an end) deletes it, in the same statement or transaction, so that a ready row exists
 * exactly while its workflow is ENQUEUED; a change of priority rewrites it. These build those statements over rows
 * that have the ready row's columns (the active row's, as an UPDATE, INSERT or DELETE returns them).
 */
export const READY_ROW_COLUMNS = 'queue_name, priority, seq, workflow_id, partition_key';

/** A ready row as a statement returns it (`READY_ROW_COLUMNS`). */
export interface ReadyRow {
  queue_name: string;
  priority: number;
  seq: string;
  workflow_id: string;
  partition_key: string | null;
}

/**
 * The ready rows of `rows` (a CTE or subquery with `READY_ROW_COLUMNS` and, unless `allEnqueued`, the stored
 * `status`): of those that are ENQUEUED, or of all of them (new rows, ENQUEUED by construction).
 */
export function insertReadyRowsSql(ready: string, rows: string, allEnqueued = false): string {
  return `INSERT INTO ${ready} (${READY_ROW_COLUMNS})
       SELECT ${READY_ROW_COLUMNS} FROM ${rows} AS x${allEnqueued ? '' : ` WHERE x.status = ${STATUS_SQL.ENQUEUED}`}`;
}

/**
 * Deletes the ready rows of `rows` (a CTE or subquery with `READY_ROW_COLUMNS`), of all of them when `queue` (an SQL
 * expression: their one queue) is given, else of those whose `status` is ENQUEUED (rows as they were before they
 * ended). A ready row is found by its queue, priority and `seq` (unique among ready rows: each is an active row's),
 * each matched against an array of the rows' distinct values, so that the ready table is read through its index
 * whatever the plan. NOTE: no array of workflow IDs: PostgreSQL 15 probes an index once per combination of its
 * arrays' values.
 */
export function deleteReadyRowsSql(ready: string, rows: string, queue?: string): string {
  const of = (column: string) =>
    `ARRAY(SELECT DISTINCT x.${column} FROM ${rows} AS x${queue ? '' : ` WHERE x.status = ${STATUS_SQL.ENQUEUED}`})`;
  return `DELETE FROM ${ready} AS r
       WHERE r.queue_name = ${queue ?? `ANY(${of('queue_name')})`} AND r.priority = ANY(${of('priority')})
         AND r.seq = ANY(${of('seq')})`;
}

/**
 * On Citus, the ready rows of new rows of one queue, as the router insert that wrote them returned them: a router
 * `INSERT … VALUES` to the queue's node, to run in the same transaction. Nothing when there are none.
 */
export async function insertReadyRowsOnCitus(query: Query, ready: string, rows: readonly ReadyRow[]): Promise<void> {
  if (rows.length === 0) return;
  const values = rows.map((_, row) => `(${[1, 2, 3, 4, 5].map((column) => `$${row * 5 + column}`).join(', ')})`);
  await query(
    `INSERT INTO ${ready} (${READY_ROW_COLUMNS}) VALUES ${values.join(', ')}`,
    rows.flatMap((row) => [row.queue_name, row.priority, row.seq, row.workflow_id, row.partition_key]),
  );
}

/**
 * On Citus, deletes the ready rows of `rows` of queue `queue` that were ENQUEUED when they were locked (a router
 * `DELETE` on the queue's node, through the ready table's index, as `deleteReadyRowsSql`), to run in their
 * transaction after the lock.
 */
export async function deleteReadyRowsOnCitus(
  query: Query,
  ready: string,
  queue: string,
  rows: ReadonlyArray<{ status: string; priority: number; seq: string; workflow_id: string }>,
): Promise<void> {
  const enqueued = rows.filter((row) => row.status === 'ENQUEUED');
  if (enqueued.length === 0) return;
  await query(`DELETE FROM ${ready} WHERE queue_name = $1 AND priority = ANY($2::int[]) AND seq = ANY($3::bigint[])`, [
    queue,
    [...new Set(enqueued.map((row) => row.priority))],
    enqueued.map((row) => row.seq),
  ]);
}

/**
 * Runs `moveSql`, an UPDATE that moves rows into ENQUEUED and returns their `READY_ROW_COLUMNS` (and whatever else),
 * with the ready rows of what it moved written in the same transaction: on one server in the same statement (the
 * UPDATE as a CTE), on Citus (where an `INSERT … SELECT` over a data-modifying CTE goes through the coordinator) as a
 * router insert after it, in `query`'s transaction or one of its own. Returns the rows it moved.
 */
export async function moveIntoReady<R extends ReadyRow>(
  database: QueueDatabase,
  ready: string,
  moveSql: string,
  params: unknown[],
  options: { query?: Query; queryOptions?: QueryOptions } = {},
): Promise<R[]> {
  if (!database.citus) {
    const sql = `WITH moved AS (${moveSql}),
       ready AS (${insertReadyRowsSql(ready, 'moved', true)})
       SELECT * FROM moved`;
    return options.query ? options.query<R>(sql, params) : database.query<R>(sql, params, options.queryOptions);
  }
  const run = async (query: Query) => {
    const rows = await query<R>(moveSql, params);
    await insertReadyRowsOnCitus(query, ready, rows);
    return rows;
  };
  return options.query ? run(options.query) : database.transaction((query) => run((sql, values) => query(sql, values)));
}
