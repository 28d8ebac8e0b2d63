import {
  WORKFLOW_COLUMN_LIST,
  WorkflowColumn,
  WorkflowTables,
  workflowColumnsSql,
  workflowTables,
} from '../../tables/workflow-tables';
import { ACTIVE_TABLE_WORKFLOW_STATUSES_SQL, STATUS_SQL } from '../../tables/workflow-status.sql';
import { nowPlusMsSql } from '../../connection/time.sql';
import { usedParameters } from '../../connection/sql-parameters';
import { streamHintPayload, streamHintPayloadSql } from '../../connection/notification-channels';
import { NOTIFY_SQL, wakeUpCteSql } from '../../connection/wake-ups.sql';
import { PINNED_SEARCH_PATH } from '../../migrations/019-enqueue-from-sql-secured.migration';
import { handOverKeysOnCitus } from './hand-over.citus';
import type { Query } from '../../connection/queue-database';
import { deleteReadyRowsOnCitus, deleteReadyRowsSql } from '../../tables/ready-rows.sql';

/**
 * Ends an `EXISTS` subquery of an expression (a select list, a RETURNING) that probes the active table by one row's
 * queue and key: without it, the planner may choose to hash the whole active table of every queue instead of one
 * index probe per row, a plan that names no queue and grows with the backlog. `OFFSET 0` keeps the subquery as written.
 */
const PROBE_EACH_ROW = 'OFFSET 0';

/**
 * "This workflow is finished and its deduplication key is free", written once. A workflow finishes by leaving the
 * active table: every statement that ends workflows (an outcome, a cancel, a timeout) is built by `endWorkflowsSql`
 * (on Citus, the statements of `endWorkflowsStatementsSql`, from the same description), which deletes the active
 * rows, writes them to the history, keeps a key record in the active table for a workflow whose deduplication window
 * is open, and, in the same transaction, hands each freed key to the `queue-next` follow-up waiting for it
 * (`handOverKeysSql`, with a snapshot taken after the rows were locked: see `handOverFunctionSql`). A key record whose
 * window is over is deleted by `releaseExpiredKeySql` when someone wants its key (never by a sweep).
 */
export interface EndSpec {
  tables: WorkflowTables;
  /** FROM items joined to the active row `w` (`unnest(...) AS o(...)`), or none. */
  using?: string;
  /**
   * Which active rows end (an SQL condition over `w` and `using`); rechecked on the locked row. With `queueParam`,
   * it names the queue (`w.queue_name = <queueParam>`), once, so that each of Citus's statements is a router one.
   */
  where: string;
  /** The status they end with (an SQL expression). */
  status: string;
  /** Their return value and error (SQL expressions); default: what the row has. */
  output?: string;
  error?: string;
  /** Which of them keep their key for their deduplication window (an SQL condition). Default: none. */
  keepsKeyWhen?: string;
  /** More RETURNING expressions of the `ended` CTE (over `w` and `using`). */
  returning?: string;
  /** Other columns of the finished row (SQL over the ended row `e`, with `end_status` and `returning`). */
  overrides?: Partial<Record<WorkflowColumn, string>>;
  /** The parameter that holds the wake-up channel (`$7`): workers of a queue whose follow-up took a key wake. */
  channelParam: string;
  /** Tables distributed on Citus: time expressions take their routable form (see `nowPlusMsSql`). */
  citus?: boolean;
  /**
   * The parameter that holds the queue of every ending row, when there is one (`$4`): the hand-over names it, so
   * that on Citus it runs on the queue's node only.
   */
  queueParam?: string;
  /** The rows that end are running (outcomes): none is ENQUEUED, so none has a ready row to delete. */
  onlyRunning?: boolean;
}

/**
 * The columns of a finished row, as the history and a key record take them, over the ending row `e` (the active
 * row with `end_status`, `end_output`, `end_error` and `keeps_key`).
 */
function finishedColumnsSql(spec: EndSpec): string {
  return workflowColumnsSql('e.', {
    ...spec.overrides,
    status: 'e.end_status',
    output: 'e.end_output',
    error: 'e.end_error',
    active_deduplication_id: 'CASE WHEN e.keeps_key THEN e.active_deduplication_id END',
    next_deduplication_id: 'NULL',
    dedup_expires_at: spec.citus
      ? nowPlusMsSql(true, 'CASE WHEN e.keeps_key THEN e.dedup_window_ms END')
      : `CASE WHEN e.keeps_key THEN now() + e.dedup_window_ms * interval '1 millisecond' END`,
    completed_at: 'now()',
    updated_at: 'now()',
  });
}

/**
 * The CTEs (without the leading WITH) that end workflows: `ended` returns the rows as they were before (`w.*`) with
 * `end_status` and whatever `returning` adds. The statement must read `ENDED_WAKE_UPS_SQL` in its final SELECT, so
 * that the freed keys are handed over (`hand_over`, which calls `handOverFunctionSql`'s function once the rows are gone
 * and the key records written) and the readers of the ended workflows' streams are told (`stream_ends`). On Citus,
 * see `endWorkflowsStatementsSql`.
 */
export function endWorkflowsSql(spec: EndSpec): string {
  const { active, history } = spec.tables;
  const keeps = spec.keepsKeyWhen ?? 'FALSE';
  const finished = finishedColumnsSql(spec);
  return `ended AS (
       DELETE FROM ${active} AS w ${spec.using ? `USING ${spec.using}` : ''}
       WHERE ${spec.where}
       RETURNING w.*, ${spec.status} AS end_status, ${spec.output ?? 'w.output'} AS end_output,
                 ${spec.error ?? 'w.error'} AS end_error, (${keeps}) AS keeps_key
                 ${spec.returning ? `, ${spec.returning}` : ''}
     ),
     archived AS (
       INSERT INTO ${history} (${WORKFLOW_COLUMN_LIST}) SELECT ${finished} FROM ended AS e
     ),
     ${spec.onlyRunning ? '' : `ready_gone AS (${deleteReadyRowsSql(spec.tables.ready, 'ended')}),`}
     key_records AS (
       INSERT INTO ${active} (${WORKFLOW_COLUMN_LIST}) SELECT ${finished} FROM ended AS e WHERE e.keeps_key
       RETURNING workflow_id
     ),
     ${handOverCallSql(
       spec.tables,
       `SELECT queue_name, active_deduplication_id AS key FROM ended WHERE active_deduplication_id IS NOT NULL
        UNION ALL SELECT NULL, NULL FROM key_records`,
       spec.channelParam,
     )},
     ${streamEndsSql(spec.tables)}`;
}

/**
 * The CTE `stream_ends`: a hint to the readers of the streams of each ended workflow that wrote one (its streams
 * close as it ends). The `ended` row is the version the DELETE took, after any stream write that held it.
 */
function streamEndsSql(tables: WorkflowTables): string {
  return `stream_ends AS (
       SELECT pg_notify('${tables.streamChannel}', ${streamHintPayloadSql('workflow_id')})::text FROM ended WHERE has_streams
     )`;
}

/**
 * The CTE `hand_over`: one call of the hand-over function (`handOverFunctionSql`) with the keys that `freedKeysSql`
 * selects (`queue_name`, `key`; null keys are left out), made once every row it reads has been produced: the
 * aggregate reads them all first, so the rows that freed the keys are gone (and any key record written) when the
 * function looks. No call when no key was freed. Read it with `END_WAKE_UPS_SQL`.
 */
export function handOverCallSql(tables: WorkflowTables, freedKeysSql: string, channelParam: string): string {
  return `hand_over AS (
       SELECT ${tables.handOverKeys}(${channelParam}, array_agg(f.queue_name), array_agg(f.key)) AS handed_over
       FROM (${freedKeysSql}) AS f
       HAVING count(f.key) > 0
     )`;
}

/** A row that `endWorkflowsStatementsSql` ends, as its first statement locks it (with what `returning` adds). */
export interface EndingRow {
  workflow_id: string;
  queue_name: string;
  workflow_name: string;
  attempts: number;
  /** Whether it had been sent messages (`messages_sent > 0`). */
  sent_messages: boolean;
  /** Whether it wrote to a stream: its readers are told it ended. */
  has_streams: boolean;
  /** Whether it keeps its key for its deduplication window (a key record stays in the active table). */
  keeps_key: boolean;
  /** The key it holds: freed (or kept in a key record, which a waiting follow-up takes precedence over). */
  active_deduplication_id: string | null;
  /** Its stored status, priority and `seq` when it was locked: an ENQUEUED one's ready row goes with it. */
  status: string;
  priority: number;
  seq: string;
}

/**
 * The columns of an `EndingRow` over the active row `w`, `keepsKey` (an SQL condition) giving `keeps_key`: the select
 * list of a statement that locks the rows that end.
 */
export function endingRowColumnsSql(keepsKey: string): string {
  return `w.workflow_id, w.queue_name, w.workflow_name, w.attempts, w.messages_sent > 0 AS sent_messages,
         w.has_streams, (${keepsKey}) AS keeps_key, w.active_deduplication_id, w.status, w.priority, w.seq`;
}

/** The statements of `endWorkflowsStatementsSql`, in the order they run. */
export interface EndStatements {
  /** Locks the rows that end and returns them (`EndingRow`). */
  lock: string;
  /** Copies them, finished, to the history. */
  archive: string;
  /** Deletes their active rows. */
  remove: string;
  /** Writes the key records of those that keep their key (only when some do). */
  keyRecords: string;
}

/**
 * On Citus, what `endWorkflowsSql` does in one statement, as router statements to run in order in one transaction,
 * each naming the queue (`queueParam`), so that Citus sends each whole to the queue's node (data-modifying CTEs that
 * read each other's rows would send them to every node). `lock` locks the rows that end (`FOR UPDATE`, which
 * rechecks `where` on a row changed meanwhile) and returns them as `EndingRow`s; then, by their IDs, the history gets
 * them (a co-located `INSERT … SELECT`, pushed down to the node), the active rows go (by `where` and their IDs: by ID
 * alone the planner may read the queue's every row), the key records are written from the history rows, and the
 * freed keys are handed to the follow-ups that wait for them (`handOverKeysOnCitus`, statements whose snapshots show
 * a follow-up committed while `lock` waited). The statements read the caller's parameters (`$1` … `$n`, `paramCount`
 * of them) and, past them, the ending rows' IDs and the IDs of those that keep their key: run them with
 * `runEndStatements` or, after a lock of the caller's, `endLockedRows`.
 */
export function endWorkflowsStatementsSql(spec: EndSpec, paramCount: number): EndStatements {
  const { active, history } = spec.tables;
  const queue = spec.queueParam;
  if (!queue) throw new Error('endWorkflowsStatementsSql needs the queue of the rows that end (queueParam)');
  const [ids, kept] = [1, 2].map((n) => `$${paramCount + n}::text[]`);
  const using = spec.using ? `, ${spec.using}` : '';
  const ending = `SELECT w.*, ${spec.status} AS end_status, ${spec.output ?? 'w.output'} AS end_output,
              ${spec.error ?? 'w.error'} AS end_error, w.workflow_id = ANY(${kept}) AS keeps_key
       FROM ${active} AS w ${using}
       WHERE ${spec.where} AND w.queue_name = ${queue} AND w.workflow_id = ANY(${ids})`;
  return {
    lock: `SELECT ${endingRowColumnsSql(spec.keepsKeyWhen ?? 'FALSE')}
         ${spec.returning ? `, ${spec.returning}` : ''}
       FROM ${active} AS w ${using}
       WHERE ${spec.where} AND w.queue_name = ${queue}
       FOR UPDATE OF w`,
    archive: `INSERT INTO ${history} (${WORKFLOW_COLUMN_LIST}) SELECT ${finishedColumnsSql(spec)} FROM (${ending}) AS e`,
    remove: `DELETE FROM ${active} AS w WHERE ${spec.where} AND w.workflow_id = ANY(${ids})`,
    keyRecords: `INSERT INTO ${active} (${WORKFLOW_COLUMN_LIST})
       SELECT ${WORKFLOW_COLUMN_LIST} FROM ${history} WHERE queue_name = ${queue} AND workflow_id = ANY(${kept})`,
  };
}

/**
 * Ends workflows with the statements of `endWorkflowsStatementsSql`, in the caller's transaction (`query`), given
 * the caller's parameter values; returns the rows that ended (none: nothing was written).
 */
export async function runEndStatements(query: Query, spec: EndSpec, params: unknown[]): Promise<EndingRow[]> {
  const statements = endWorkflowsStatementsSql(spec, params.length);
  const ending = await query<EndingRow>(...usedParameters(statements.lock, params));
  return endRows(query, spec, params, statements, ending);
}

/**
 * `runEndStatements` after its lock, for rows `ending` that the caller locked in this transaction (`FOR UPDATE`, of
 * the rows `spec.where` matches): archived, deleted, their key records written, then `runAfterEnding`. Returns them.
 */
export async function endLockedRows(
  query: Query,
  spec: EndSpec,
  params: unknown[],
  ending: EndingRow[],
): Promise<EndingRow[]> {
  return endRows(query, spec, params, endWorkflowsStatementsSql(spec, params.length), ending);
}

async function endRows(
  query: Query,
  spec: EndSpec,
  params: unknown[],
  statements: EndStatements,
  ending: EndingRow[],
): Promise<EndingRow[]> {
  if (ending.length === 0) return ending;
  const run = <T>(sql: string) => query<T>(...usedParameters(sql, endValues(params, ending)));
  await run(statements.archive);
  await run(statements.remove);
  const [, [queue]] = usedParameters(spec.queueParam ?? '', params);
  await deleteReadyRowsOnCitus(query, spec.tables.ready, queue as string, ending);
  if (ending.some((row) => row.keeps_key)) await run(statements.keyRecords);
  await runAfterEnding(query, spec, params, ending);
  return ending;
}

/**
 * On Citus, what follows the end of the rows `ending` (archived, deleted, their key records written) in the same
 * transaction: their freed keys handed to the follow-ups that wait for them (`handOverKeysOnCitus`) and the readers of
 * their streams told. `params` as for `runEndStatements`.
 */
export async function runAfterEnding(
  query: Query,
  spec: EndSpec,
  params: unknown[],
  ending: EndingRow[],
): Promise<void> {
  if (!spec.queueParam) throw new Error('runAfterEnding needs the queue of the rows that ended (queueParam)');
  const [, [queue, channel]] = usedParameters(`${spec.queueParam} ${spec.channelParam}`, params);
  const keys = ending.flatMap((row) => (row.active_deduplication_id === null ? [] : [row.active_deduplication_id]));
  await handOverKeysOnCitus(query, spec.tables.active, queue as string, keys, channel as string);
  const withStreams = ending.filter((row) => row.has_streams).map((row) => streamHintPayload(row.workflow_id));
  if (withStreams.length > 0) await query(NOTIFY_SQL, [spec.tables.streamChannel, withStreams]);
}

/** The caller's parameters, then the ending rows' IDs and the IDs of those that keep their key. */
function endValues(params: unknown[], ending: EndingRow[]): unknown[] {
  return [
    ...params,
    ending.map((row) => row.workflow_id),
    ending.filter((row) => row.keeps_key).map((row) => row.workflow_id),
  ];
}

/**
 * The hand-over of freed keys, written once: the CTEs `followed`, `released`, `handed_over` and `hand_over_wake_ups`.
 * Of the keys that `freedKeysSql` selects (`queue_name`, `key`), each that a `queue-next` follow-up waits for (ENQUEUED,
 * holding the key's "next" slot) and that no workflow holds (unfinished, or parked: see `parkedSql`) goes to the
 * follow-up, which is due at once;
 * a key record kept for a deduplication window is deleted first (a waiting follow-up takes precedence over a window).
 * Its queue's workers are woken (on Citus by the caller: see wake-ups.sql.ts). `queue`, when given, is named by every
 * read, so that on Citus the statement runs on the queue's node.
 *
 * NOTE: its snapshot must be taken after the rows that held the keys were locked and ended: a follow-up inserted
 * while its holder ended locks the holder's row (`FOR SHARE`) until it commits, so the end waited for it, and a
 * snapshot taken before that wait does not show it (READ COMMITTED). Hence statements of their own on Citus
 * (`handOverKeysOnCitus`, which the transaction that freed the keys runs), and on one server a volatile function that the ending statement calls (`handOverFunctionSql`), whose queries each take a
 * new snapshot. The key's holder is gone by then, so the unique index allows the move.
 */
export function handOverKeysSql(
  active: string,
  freedKeysSql: string,
  channel: string,
  queue?: string,
  citus = false,
): string {
  const inQueue = (alias: string) => (queue ? `AND ${alias}.queue_name = ${queue}` : '');
  return `followed AS (
       SELECT DISTINCT fr.queue_name, fr.key FROM (${freedKeysSql}) AS fr
       WHERE fr.key IS NOT NULL
         AND EXISTS (SELECT 1 FROM ${active} AS f
                     WHERE f.queue_name = fr.queue_name AND f.next_deduplication_id = fr.key
                       AND f.status = ${STATUS_SQL.ENQUEUED} ${inQueue('f')})
         AND NOT EXISTS (SELECT 1 FROM ${active} AS h
                         WHERE h.queue_name = fr.queue_name AND h.active_deduplication_id = fr.key
                           AND h.status IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL} ${inQueue('h')})
     ),
     released AS (
       DELETE FROM ${active} AS r USING followed AS s
       WHERE r.queue_name = s.queue_name AND r.active_deduplication_id = s.key
         AND r.status NOT IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL} ${inQueue('r')}
       RETURNING r.workflow_id
     ),
     handed_over AS (
       UPDATE ${active} AS f
       SET active_deduplication_id = f.next_deduplication_id, next_deduplication_id = NULL, not_before = NULL,
           updated_at = now()
       FROM followed AS s
       WHERE f.queue_name = s.queue_name AND f.next_deduplication_id = s.key AND f.status = ${STATUS_SQL.ENQUEUED}
         AND (SELECT count(*) FROM released) >= 0 ${inQueue('f')}
       RETURNING f.queue_name
     ),
     ${wakeUpCteSql(citus, 'hand_over_wake_ups', channel, 'handed_over')}`;
}

/**
 * The function `handOverKeysSql` runs in on one server (`<schema>.hand_over_keys(channel, queues, keys)`, created by
 * migration 020): it hands the freed keys (`p_keys[i]` of queue `p_queues[i]`) to their follow-ups, sends the wake-ups
 * on `p_channel`, and returns how many follow-ups took a key. VOLATILE, so that its statement takes a snapshot of its own
 * when called (see `handOverKeysSql`); the ending statement calls it through `endWorkflowsSql`'s `hand_over` once its
 * rows are gone. Only the module's role (its owner) may call it, with the `search_path` of the schema's functions.
 * NOTE: a change to the hand-over must come with a migration that creates the function again.
 */
export function handOverFunctionSql(schemaSql: string): string {
  const { active, handOverKeys } = workflowTables(schemaSql);
  return `
    CREATE OR REPLACE FUNCTION ${handOverKeys}(p_channel text, p_queues text[], p_keys text[]) RETURNS int
    LANGUAGE plpgsql VOLATILE ${PINNED_SEARCH_PATH} AS $hand_over$
    DECLARE
      handed int;
      woken int;
    BEGIN
      WITH ${handOverKeysSql(active, 'SELECT q AS queue_name, k AS key FROM unnest(p_queues, p_keys) AS u(q, k)', 'p_channel')}
      SELECT (SELECT count(*)::int FROM handed_over), (SELECT count(*)::int FROM hand_over_wake_ups) INTO handed, woken;
      RETURN handed;
    END $hand_over$;
    REVOKE ALL ON FUNCTION ${handOverKeys}(text, text[], text[]) FROM PUBLIC;
  `;
}

/**
 * A statement that hands stranded follow-ups of queue `$2` their keys (wake-ups on channel `$1`): a `queue-next`
 * follow-up is stranded when no unfinished workflow holds its key. The ending transaction hands a freed key over
 * (`handOverKeysSql`), so nothing should be stranded; the heartbeat runs this as a repair of a schema written by an
 * earlier version (whose hand-over could miss a follow-up committed while its holder ended). Returns `handed_over`,
 * the number of follow-ups that took their key.
 */
export function handOverStrandedSql(active: string, citus: boolean): string {
  const strandedKeys = `SELECT $2::text AS queue_name, f.next_deduplication_id AS key FROM ${active} AS f
       WHERE f.queue_name = $2 AND f.next_deduplication_id IS NOT NULL AND f.status = ${STATUS_SQL.ENQUEUED}`;
  return `WITH ${handOverKeysSql(active, strandedKeys, '$1', '$2', citus)}
     SELECT (SELECT count(*)::int FROM handed_over) AS handed_over, (SELECT count(*) FROM hand_over_wake_ups) AS woken`;
}

/**
 * Reads the hand-over of an ending statement (`endWorkflowsSql`'s `hand_over`), so that it runs: a CTE that no one
 * reads does not run. How many follow-ups took a key (null when no key was freed).
 */
export const END_WAKE_UPS_SQL = '(SELECT handed_over FROM hand_over)';

/** In a statement of `endWorkflowsSql`: reads the hand-over and the stream readers' hints (`stream_ends`), so that both run. */
export const ENDED_WAKE_UPS_SQL = `(coalesce(${END_WAKE_UPS_SQL}, 0) + (SELECT count(*) FROM stream_ends))`;

/**
 * Whether a workflow that ends with `outcome` (an SQL expression: `'SUCCESS'` or `'ERROR'`) keeps its key for its
 * deduplication window: it has one, it did not fail with `releaseKeyOnError`, and no `queue-next` follow-up waits for
 * the key (the follow-up takes precedence). The row is aliased `w`; `queue` is its queue (a parameter, on Citus, so
 * that the statement stays on the queue's node).
 */
export function keepsKeyInWindowSql(active: string, outcome: string, queue = 'w.queue_name'): string {
  return `${holdsKeyForWindowSql(`${outcome} = ${STATUS_SQL.ERROR}`)}
    AND NOT EXISTS (SELECT 1 FROM ${active} AS f
                    WHERE f.queue_name = ${queue} AND f.next_deduplication_id = w.active_deduplication_id
                    ${PROBE_EACH_ROW})`;
}

/**
 * `keepsKeyInWindowSql` but for its follow-up probe: the row `w` has a key and a deduplication window, and did not
 * fail (`erred`, an SQL condition) with `releaseKeyOnError`. On Citus, the outcome lock reads it and then asks
 * `FOLLOWED_KEYS_SQL` which of those keys a follow-up waits for, each a statement on Citus's fast path.
 */
export function holdsKeyForWindowSql(erred: string): string {
  return `w.dedup_window_ms IS NOT NULL AND w.active_deduplication_id IS NOT NULL
    AND NOT ((${erred}) AND w.release_key_on_error)`;
}

/** Which of the keys `$2` (text[]) of queue `$1` a `queue-next` follow-up waits for (see `keepsKeyInWindowSql`). */
export function followedKeysSql(active: string): string {
  return `SELECT next_deduplication_id AS key FROM ${active}
         WHERE queue_name = $1 AND next_deduplication_id = ANY($2::text[])`;
}

/** Whether an active row's hold on its `active_deduplication_id` is still on (no window, or one not over yet). */
export function windowOpenSql(row = ''): string {
  return `(${row}dedup_expires_at IS NULL OR ${row}dedup_expires_at > now())`;
}

/** Deletes the key record of `$1` queue and `$2` key if its deduplication window is over; returns its workflow ID. */
export function releaseExpiredKeySql(active: string): string {
  return `DELETE FROM ${active}
         WHERE queue_name = $1 AND active_deduplication_id = $2 AND dedup_expires_at <= now()
         RETURNING workflow_id`;
}
