import type { TransactionQuery } from '../../connection/queue-database';
import { STATUS_SQL } from '../../tables/workflow-status.sql';
import { WORKFLOW_COLUMN_LIST } from '../../tables/workflow-tables';
import {
  EndSpec,
  EndingRow,
  endLockedRows,
  endingRowColumnsSql,
  followedKeysSql,
  holdsKeyForWindowSql,
  runAfterEnding,
} from './workflow-finish.sql';
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

/**
 * From this many ending outcomes on, a batch is archived by a co-located `INSERT … SELECT` (`endManyOutcomes`);
 * below, by `INSERT … VALUES` of the rows as deleted (`endFewOutcomes`). The router insert sends every value through
 * Citus's deparser and the node's parser, so its cost grows with the rows about five times as fast; the
 * `INSERT … SELECT` costs more to plan, once per batch. Measured per batch (coordinator + nodes, docs/citus.md,
 * "One queue's drain on its node"): about even at 16 rows, the router insert 700 µs cheaper at 8, twice as dear at 64.
 */
const ARCHIVE_BY_SELECT_FROM = 16;

/**
 * The parameters of the statements that end `outcomes` of `queue` under `executorId`: $1 the queue, $2 their IDs,
 * $3 the executor, $4 their runs, $5 the runs that failed (whose key a `releaseKeyOnError` workflow gives up).
 */
function endingParams(queue: string, executorId: string, outcomes: EndingOutcome[]): unknown[] {
  return [
    queue,
    outcomes.map((o) => o.workflowId),
    executorId,
    outcomes.map(runOf),
    outcomes.filter((o) => o.status === 'ERROR').map(runOf),
  ];
}

/** The active rows `w` that `endingParams` names: still PENDING under the executor, in the outcome's run. */
const ENDING_ROWS_SQL = `w.queue_name = $1 AND w.workflow_id = ANY($2::text[]) AND w.status = ${STATUS_SQL.PENDING}
       AND w.executor_id = $3 AND ${RUN_OF_ROW_SQL} = ANY($4::text[])`;

/** Whether the row `w` may keep its key for a deduplication window, its follow-up aside (`$5`: the failed runs). */
const HOLDS_KEY_SQL = holdsKeyForWindowSql(`${RUN_OF_ROW_SQL} = ANY($5::text[])`);

/**
 * On Citus, the workflows of `outcomes` (of `queue`) that end, ended in the caller's transaction with their freed keys
 * handed over, by `endFewOutcomes` or `endManyOutcomes` (by the batch's size: `ARCHIVE_BY_SELECT_FROM`). `spec` is the
 * outcome statement's description and `params` its parameters. Returns the rows that ended.
 */
export async function endOutcomesOnCitus(
  query: TransactionQuery,
  spec: EndSpec,
  params: unknown[],
  queue: string,
  executorId: string,
  outcomes: EndingOutcome[],
): Promise<EndingRow[]> {
  if (outcomes.length === 0) return [];
  const batch = { spec, params, queue, executorId, outcomes };
  return outcomes.length < ARCHIVE_BY_SELECT_FROM ? endFewOutcomes(query, batch) : endManyOutcomes(query, batch);
}

/** What `endOutcomesOnCitus` was given: the outcomes of one queue that end, and the outcome statement's description. */
interface EndingBatch {
  spec: EndSpec;
  params: unknown[];
  queue: string;
  executorId: string;
  outcomes: EndingOutcome[];
}

/**
 * The rows locked (`SELECT … FOR UPDATE` on Citus's fast path, which rechecks their condition on a row changed
 * meanwhile), then `endLockedRows`: the history gets them by a co-located `INSERT … SELECT`, the active rows go (by
 * the lock's condition too, which the planner reads through the executor's running rows), the key records are
 * copied from the history, and the freed keys are handed over.
 */
async function endManyOutcomes(query: TransactionQuery, batch: EndingBatch): Promise<EndingRow[]> {
  const { spec, params, queue, executorId, outcomes } = batch;
  const locked = await query<EndingRow>(
    `SELECT ${endingRowColumnsSql(HOLDS_KEY_SQL)}
     FROM ${spec.tables.active} AS w
     WHERE ${ENDING_ROWS_SQL}
     FOR UPDATE`,
    endingParams(queue, executorId, outcomes),
  );
  const followed = await followedKeys(query, spec, queue, locked);
  const ending = locked.map((row) => ({ ...row, keeps_key: keepsKey(row, followed) }));
  return endLockedRows(query, spec, params, ending);
}

type DeletedRow = RowAsSent & { messages_sent: string; has_streams: string; keeps_key: string };

/**
 * The rows deleted (`DELETE … RETURNING`, whose condition is rechecked on a row changed meanwhile, as a lock's would
 * be), then the finished rows written to the history and the key records to the active table, each an
 * `INSERT … VALUES` of the rows as deleted (their text, so times keep their microseconds) with the outcome's changes
 * (`endWorkflowsSql`'s finished columns); then the freed keys are handed over (`runAfterEnding`).
 */
async function endFewOutcomes(query: TransactionQuery, batch: EndingBatch): Promise<EndingRow[]> {
  const { spec, params, queue, executorId, outcomes } = batch;
  const deleted = await query<DeletedRow>(
    `DELETE FROM ${spec.tables.active} AS w
     WHERE ${ENDING_ROWS_SQL}
     RETURNING ${WORKFLOW_COLUMN_LIST}, w.messages_sent, w.has_streams, ${HOLDS_KEY_SQL} AS keeps_key`,
    endingParams(queue, executorId, outcomes),
    { asSent: true },
  );
  const rows = deleted.map((row) => ({
    row,
    keeps_key: row.keeps_key === 't',
    active_deduplication_id: row.active_deduplication_id,
  }));
  const followed = await followedKeys(query, spec, queue, rows);
  const outcomeOf = new Map(outcomes.map((o) => [o.workflowId, o]));
  const ended = rows.map(({ row, ...holds }) => {
    const outcome = outcomeOf.get(row.workflow_id as string) as EndingOutcome;
    const keeps = keepsKey(holds, followed);
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
  for (const { sql, params } of insertRowsSql(spec.tables.history, queue, ended)) await query(sql, params);
  const kept = ended.filter((row) => row.keeps);
  for (const { sql, params } of insertRowsSql(spec.tables.active, queue, kept)) await query(sql, params);
  const endedRows = ended.map(({ row, keeps }) => ({
    workflow_id: row.workflow_id as string,
    queue_name: queue,
    workflow_name: row.workflow_name as string,
    attempts: Number(row.attempts),
    sent_messages: Number(row.messages_sent) > 0,
    has_streams: row.has_streams === 't',
    keeps_key: keeps,
    active_deduplication_id: row.active_deduplication_id,
    status: row.status as string,
    priority: Number(row.priority),
    seq: row.seq as string,
  }));
  if (endedRows.length > 0) await runAfterEnding(query, spec, params, endedRows);
  return endedRows;
}

interface HoldsKey {
  keeps_key: boolean;
  active_deduplication_id: string | null;
}

/**
 * Which keys of `rows` that may be kept for a window a `queue-next` follow-up waits for (it takes the key instead:
 * `keepsKeyInWindowSql`, in two parts, the second a statement on Citus's fast path).
 */
async function followedKeys(
  query: TransactionQuery,
  spec: EndSpec,
  queue: string,
  rows: HoldsKey[],
): Promise<ReadonlySet<string>> {
  const windowKeys = rows.flatMap((row) => (row.keeps_key && row.active_deduplication_id) || []);
  if (windowKeys.length === 0) return new Set();
  const found = await query<{ key: string }>(followedKeysSql(spec.tables.active), [queue, windowKeys]);
  return new Set(found.map((row) => row.key));
}

function keepsKey(row: HoldsKey, followed: ReadonlySet<string>): boolean {
  return row.keeps_key && !followed.has(row.active_deduplication_id as string);
}
