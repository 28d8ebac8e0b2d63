import { NOTIFY_SQL } from '../../connection/wake-ups.sql';
import { ACTIVE_TABLE_WORKFLOW_STATUSES_SQL, STATUS_SQL } from '../../tables/workflow-status.sql';
import type { Query } from '../../connection/queue-database';

/**
 * The statements of `handOverKeysOnCitus`, each over one table and keyed by one queue (`$1`), so that Citus plans it
 * on its fast path: each reads the keys `$2` (text[]).
 */
function handOverStatementsSql(active: string): {
  followed: string;
  holders: string;
  released: string;
  handedOver: string;
} {
  const ofKeys = (column: string) => `queue_name = $1::text AND ${column} = ANY($2::text[])`;
  return {
    followed: `SELECT DISTINCT next_deduplication_id AS key FROM ${active}
       WHERE ${ofKeys('next_deduplication_id')} AND status = ${STATUS_SQL.ENQUEUED}`,
    holders: `SELECT active_deduplication_id AS key, status IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL} AS holds
       FROM ${active} WHERE ${ofKeys('active_deduplication_id')}`,
    released: `DELETE FROM ${active}
       WHERE ${ofKeys('active_deduplication_id')} AND status NOT IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL}`,
    handedOver: `UPDATE ${active}
       SET active_deduplication_id = next_deduplication_id, next_deduplication_id = NULL, not_before = NULL,
           updated_at = now()
       WHERE ${ofKeys('next_deduplication_id')} AND status = ${STATUS_SQL.ENQUEUED}
       RETURNING workflow_id`,
  };
}

/**
 * On Citus, what `handOverKeysSql` does on one server, in the caller's transaction after the statements that freed
 * `keys` (of `queue`), as statements on Citus's fast path (`handOverStatementsSql`): which of the keys a `queue-next`
 * follow-up waits for (ENQUEUED, holding the key's "next" slot); which of those a workflow still holds (unfinished,
 * or parked: those stay with it) and which a key record kept for a deduplication window (a waiting follow-up takes
 * precedence over a window: the record is deleted); then the follow-ups of the keys left take them and are due at
 * once, and the queue's workers are woken on `channel` (from the coordinator, where the listeners are). Returns how
 * many follow-ups took a key.
 *
 * Each statement takes a snapshot of its own, after the rows that held the keys were locked and ended (see
 * `handOverKeysSql`). No follow-up of these keys can be inserted and no holder appear between them: a follow-up
 * locks its key's holder (`FOR SHARE`), which the caller's transaction locked and deleted, and the key's unique
 * index holds a new holder of the key until that transaction ends.
 */
export async function handOverKeysOnCitus(
  query: Query,
  active: string,
  queue: string,
  keys: readonly string[],
  channel: string,
): Promise<number> {
  if (keys.length === 0) return 0;
  const statements = handOverStatementsSql(active);
  const followed = await query<{ key: string }>(statements.followed, [queue, keys]);
  if (followed.length === 0) return 0;
  const holders = await query<{ key: string; holds: boolean }>(statements.holders, [
    queue,
    followed.map((row) => row.key),
  ]);
  const held = new Set(holders.flatMap((row) => (row.holds ? [row.key] : [])));
  const free = followed.flatMap((row) => (held.has(row.key) ? [] : [row.key]));
  if (free.length === 0) return 0;
  if (holders.some((row) => !row.holds && !held.has(row.key))) await query(statements.released, [queue, free]);
  const handedOver = await query(statements.handedOver, [queue, free]);
  if (handedOver.length > 0) await query(NOTIFY_SQL, [channel, [queue]]);
  return handedOver.length;
}
