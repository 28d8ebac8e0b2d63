import type { QueueDatabase } from './queue-database';

/**
 * Wake-ups, written once. A wake-up is a NOTIFY on the schema's wake-up channel whose payload is a queue name: the
 * queue's workers claim at once instead of at their next poll. On one server a statement sends its own, from a CTE
 * over the rows it changed. On Citus a statement of one queue runs whole on the queue's worker node, inside Citus's
 * own transaction there; the CTE only yields a row per queue it would wake, and the caller sends the wake-ups after
 * the statement with `sendWakeUpsLeftToCaller`, whose statement reads no table and so runs on the node the caller
 * connects to (every instance LISTENs on every node: `CitusNodeListeners`).
 */

/**
 * The CTE `name` that wakes the queues of `source` (a FROM item with `queue_name`, which may carry a WHERE) on the
 * channel parameter `channelParam`: one row per queue. A CTE runs only when read: the statement must read it (for
 * example `(SELECT count(*) FROM name)`).
 */
export function wakeUpCteSql(citus: boolean, name: string, channelParam: string, source: string): string {
  const wakeUp = citus ? `${channelParam}::text` : `pg_notify(${channelParam}, queue_name)::text`;
  return `${name} AS (SELECT ${wakeUp} AS wake_up FROM (SELECT DISTINCT queue_name FROM ${source}) AS q)`;
}

/**
 * Sends each of `$2` (text[]) on channel `$1`. It reads no table, so on Citus it runs on the node the caller
 * connects to, where every instance LISTENs; sent on commit, as any NOTIFY.
 */
export const NOTIFY_SQL = 'SELECT pg_notify($1, payload)::text FROM unnest($2::text[]) AS payload';

/**
 * On Citus, sends the wake-ups of `queues` that a statement built with `wakeUpCteSql` left to its caller (pass none
 * when it woke nothing), through `query` when the statement ran in a transaction; on one server the statement sent
 * them itself.
 */
export async function sendWakeUpsLeftToCaller(
  database: Pick<QueueDatabase, 'citus' | 'wakeUpChannel' | 'query'>,
  queues: string[],
  query: (sql: string, params: unknown[]) => Promise<unknown> = (sql, params) => database.query(sql, params),
): Promise<void> {
  if (database.citus && queues.length > 0) await query(NOTIFY_SQL, [database.wakeUpChannel, queues]);
}
