import { WAKE_UP_CHANNEL_PREFIX } from './notification-channels';
import { STATUS_SQL } from './workflow-status.sql';

/**
 * "This workflow is finished and its deduplication key is free", written once. Every statement that ends a
 * workflow (an outcome, a cancel, a timeout, a dead letter) sets the columns that `finishWorkflowSql` gives; the
 * key a finished workflow keeps for its deduplication window is let go by `releaseExpiredKeySql` when someone
 * wants it (never by a sweep); and whenever a key is let go, the trigger of `promoteFollowUpFunctionSql` hands it,
 * in the same statement, to the `queue-next` follow-up waiting for it.
 *
 * A finished workflow: a finished status, `completed_at` set, no "next" slot, and `active_deduplication_id` NULL,
 * unless it keeps the key until `dedup_expires_at` (then `keyFreeSql` and `windowOpenSql` tell whether it still does).
 */
export interface FinishSpec {
  /** The alias of the updated row, with its dot (`'w.'`), or `''`. */
  row: string;
  /** The status the rows get, as an SQL expression (for the rows that do not end too). */
  status: string;
  /** Which rows of the statement end (an SQL condition); the others keep their key. Default: every row. */
  endsWhen?: string;
  /** Which ending rows keep their key for their deduplication window (an SQL condition). Default: none. */
  keepsKeyWhen?: string;
}

/** The SET assignments of a statement that ends workflows (see above); `updated_at` included. */
export function finishWorkflowSql({ row, status, endsWhen, keepsKeyWhen }: FinishSpec): string {
  const ends = endsWhen ?? 'TRUE';
  const keeps = keepsKeyWhen ?? 'FALSE';
  return `status = ${status},
    active_deduplication_id = CASE WHEN NOT (${ends}) OR (${keeps}) THEN ${row}active_deduplication_id END,
    next_deduplication_id = CASE WHEN ${ends} THEN NULL ELSE ${row}next_deduplication_id END,
    dedup_expires_at = CASE WHEN (${ends}) AND (${keeps})
                            THEN now() + ${row}dedup_window_ms * interval '1 millisecond' END,
    completed_at = CASE WHEN ${ends} THEN now() END,
    updated_at = now()`;
}

/**
 * Whether a workflow that ends with `outcome` (an SQL expression: `'SUCCESS'` or `'ERROR'`) keeps its key for its
 * deduplication window: it has one, it did not fail with `releaseKeyOnError`, and no `queue-next` follow-up waits for
 * the key (the follow-up takes precedence). `table` is the qualified `workflows` table, the row is aliased `w`.
 */
export function keepsKeyInWindowSql(table: string, outcome: string): string {
  return `w.dedup_window_ms IS NOT NULL
    AND NOT (${outcome} = ${STATUS_SQL.ERROR} AND w.release_key_on_error)
    AND NOT EXISTS (SELECT 1 FROM ${table} AS f
                    WHERE f.queue_name = w.queue_name AND f.next_deduplication_id = w.active_deduplication_id)`;
}

/** Whether a row's hold on its `active_deduplication_id` is still on (no window, or a window not over yet). */
export function windowOpenSql(row = ''): string {
  return `(${row}dedup_expires_at IS NULL OR ${row}dedup_expires_at > now())`;
}

/** Whether a row holds no key now: none, or its deduplication window is over. */
export function keyFreeSql(row = ''): string {
  return `(${row}active_deduplication_id IS NULL OR ${row}dedup_expires_at <= now())`;
}

/**
 * Lets go of the key of `$1` queue and `$2` key if its deduplication window is over; returns the workflow IDs.
 * Letting go fires the follow-up hand-over.
 */
export function releaseExpiredKeySql(table: string): string {
  return `UPDATE ${table} SET active_deduplication_id = NULL, updated_at = now()
         WHERE queue_name = $1 AND active_deduplication_id = $2 AND dedup_expires_at <= now()
         RETURNING workflow_id`;
}

/**
 * The follow-up hand-over: the trigger function (created by migration 004, made from this definition since 011) that
 * runs after a row's `active_deduplication_id` goes from a key to NULL. In the same statement, the `queue-next`
 * follow-up waiting for that key (ENQUEUED, not due, holding the key's "next" slot) takes the key, becomes due at
 * once, and its queue's workers are woken on the wake-up channel.
 */
export function promoteFollowUpFunctionSql(schemaSql: string): string {
  return `
    CREATE OR REPLACE FUNCTION ${schemaSql}.promote_follow_up() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE ${schemaSql}.workflows
      SET active_deduplication_id = next_deduplication_id, next_deduplication_id = NULL, not_before = NULL,
          updated_at = now()
      WHERE queue_name = NEW.queue_name AND next_deduplication_id = OLD.active_deduplication_id
        AND status = ${STATUS_SQL.ENQUEUED};
      IF FOUND THEN
        PERFORM pg_notify('${WAKE_UP_CHANNEL_PREFIX}' || TG_TABLE_SCHEMA, NEW.queue_name);
      END IF;
      RETURN NULL;
    END $$;
  `;
}
