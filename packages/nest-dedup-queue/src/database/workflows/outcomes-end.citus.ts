import type { TransactionQuery } from '../connection/queue-database';
import { STATUS_SQL } from '../tables/workflow-status.sql';
import { WORKFLOW_COLUMN_LIST, WorkflowTables } from '../tables/workflow-tables';
import { EndingRow, followedKeysSql, holdsKeyForWindowSql } from './workflow-finish.sql';
import { FinishedChanges, NOW, RowAsSent, insertRowsSql } from './finished-rows.sql';

/** The run of the active row `w`, `<attempts>:<workflow ID>` (see `runOf`). */
export const RUN_OF_ROW_SQL = `(w.attempts::text || ':' || w.workflow_id)`;

/** The run an outcome is for, `<attempt>:<workflow ID>`, as `RUN_OF_ROW_SQL` gives it of the active row `w`. */
export function runOf(outcome: { workflowId: string; attempt: number }): string {
  return `${outcome.attempt}:${outcome.workflowId}`;
}

/** An outcome that ends its workflow (not a retry, not a park). */
export interface EndingOutcome {
  workflowId: string;
  attempt: number;
  status: 'SUCCESS' | 'ERROR';
  outputJson: string | null;
  error: unknown;
}

type DeletedRow = RowAsSent & { messages_sent: string; has_streams: string; holds_key: string };

/**
 * On Citus, the workflows of `outcomes` (of `queue`) that end, ended in the caller's transaction by statements that
 * Citus plans on its fast path or as router inserts, none through its full planner: their active rows deleted if still
 * PENDING under `executorId` in the outcome's run (`DELETE … RETURNING`, whose condition is rechecked on a row changed
 * meanwhile, as a lock's would be); which of the keys kept for a window a `queue-next` follow-up waits for (it takes
 * the key instead: `keepsKeyInWindowSql`, in two parts); the finished rows written to the history and the key records
 * to the active table, each an `INSERT … VALUES` of the rows as deleted (their text, so times keep their
 * microseconds) with the outcome's changes (`endWorkflowsSql`'s finished columns). The caller hands the freed keys
 * over (`runAfterEnding`). Returns the rows that ended.
 */
export async function endOutcomesOnCitus(
  query: TransactionQuery,
  tables: WorkflowTables,
  queue: string,
  executorId: string,
  outcomes: EndingOutcome[],
): Promise<EndingRow[]> {
  if (outcomes.length === 0) return [];
  const deleted = await query<DeletedRow>(
    `DELETE FROM ${tables.active} AS w
     WHERE w.queue_name = $1 AND w.workflow_id = ANY($2::text[]) AND w.status = ${STATUS_SQL.PENDING}
       AND w.executor_id = $3 AND ${RUN_OF_ROW_SQL} = ANY($4::text[])
     RETURNING ${WORKFLOW_COLUMN_LIST}, w.messages_sent, w.has_streams,
               ${holdsKeyForWindowSql(`${RUN_OF_ROW_SQL} = ANY($5::text[])`)} AS holds_key`,
    [
      queue,
      outcomes.map((o) => o.workflowId),
      executorId,
      outcomes.map(runOf),
      outcomes.filter((o) => o.status === 'ERROR').map(runOf),
    ],
    { asSent: true },
  );
  if (deleted.length === 0) return [];
  const windowKeys = deleted.flatMap((row) => (row.holds_key === 't' && row.active_deduplication_id) || []);
  const followed = new Set(
    windowKeys.length === 0
      ? []
      : (await query<{ key: string }>(followedKeysSql(tables.active), [queue, windowKeys])).map((row) => row.key),
  );
  const outcomeOf = new Map(outcomes.map((o) => [o.workflowId, o]));
  const ended = deleted.map((row) => {
    const outcome = outcomeOf.get(row.workflow_id as string) as EndingOutcome;
    const keeps = row.holds_key === 't' && !followed.has(row.active_deduplication_id as string);
    const changes: FinishedChanges = {
      status: outcome.status,
      output: outcome.outputJson,
      error: outcome.error ? JSON.stringify(outcome.error) : null,
      failed_attempts: Number(row.failed_attempts) + (outcome.status === 'SUCCESS' ? 0 : 1),
      active_deduplication_id: keeps ? row.active_deduplication_id : null,
      next_deduplication_id: null,
      dedup_expires_at: keeps ? { msFromNow: Number(row.dedup_window_ms) } : null,
      completed_at: NOW,
      updated_at: NOW,
    };
    return { row, changes, keeps };
  });
  for (const { sql, params } of insertRowsSql(tables.history, queue, ended)) await query(sql, params);
  const kept = ended.filter((row) => row.keeps);
  for (const { sql, params } of insertRowsSql(tables.active, queue, kept)) await query(sql, params);
  return ended.map(({ row, keeps }) => ({
    workflow_id: row.workflow_id as string,
    queue_name: queue,
    workflow_name: row.workflow_name as string,
    attempts: Number(row.attempts),
    sent_messages: Number(row.messages_sent) > 0,
    has_streams: row.has_streams === 't',
    keeps_key: keeps,
    active_deduplication_id: row.active_deduplication_id,
  }));
}
