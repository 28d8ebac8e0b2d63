import {
  NEW_WORKFLOW_INPUTS,
  NEW_WORKFLOW_INPUT_NAMES,
  type NewWorkflowInputName,
  newWorkflowColumns,
} from './new-workflow.columns';
import { SqlParameters, arrayParameter } from '../../connection/sql-parameters';
import { ENDED_WAKE_UPS_SQL, EndSpec, endWorkflowsSql, windowOpenSql } from '../finish/workflow-finish.sql';
import type { NewWorkflow } from '../new-workflow';
import { ACTIVE_TABLE_WORKFLOW_STATUSES_SQL, STATUS_SQL } from '../../tables/workflow-status.sql';
import { REPORTED_STATUS_SQL } from '../workflow-row';
import type { WorkflowTables } from '../../tables/workflow-tables';
import { READY_ROW_COLUMNS, insertReadyRowsSql } from '../../tables/ready-rows.sql';

interface Statement<C> {
  sql: string;
  params: SqlParameters<C>;
}

/** What a supersede statement is given. */
export interface SupersedeContext {
  workflow: NewWorkflow;
  requireSameArgs: boolean;
  channel: string;
}

/** A row holding a key or waiting for it, as `supersede` locks it. */
export interface SupersededHolderRow {
  workflow_id: string;
  held_key: boolean;
  unfinished: boolean;
  window_open: boolean;
  same_args: boolean;
}

/** The statements that insert new rows, built once per table from `newWorkflowColumns`. */
export interface InsertStatements {
  one: Statement<{ workflow: NewWorkflow; channel: string }>;
  many: Statement<{ workflows: NewWorkflow[]; channel: string }>;
  /** `many` for a batch whose workflow IDs are all generated (new by construction): no look-up by ID. */
  manyGenerated: Statement<{ workflows: NewWorkflow[]; channel: string }>;
  /**
   * `many` for a batch of one row (a lone enqueue call): the same statement and results, its inputs as scalar
   * parameters instead of one array each, so neither side builds or parses an array.
   */
  lone: Statement<{ workflows: NewWorkflow[]; channel: string }>;
  /** `manyGenerated` for a lone call, in a cheaper form with results of its own (see `insertLoneGeneratedStatement`). */
  loneGenerated: Statement<{ workflows: NewWorkflow[]; channel: string }>;
  /** On Citus, in place of `many`: `rows` (1 to `MAX_ROWS_PER_ROUTER_INSERT`) rows of one queue, a router insert. */
  rowsOfOneQueue(rows: number): Statement<NewWorkflow[]>;
  followUp: Statement<NewWorkflow>;
  /**
   * On Citus, `followUp` as two statements to run in one transaction, neither through Citus's full planner: the
   * key's started holder locked `FOR SHARE` (fast path), then, if there is one, the follow-up inserted by `VALUES`
   * (a router insert; the CTE `holder` of `followUp` is run as a subplan, the insert pulled to the coordinator).
   */
  followUpHolder: Statement<NewWorkflow>;
  followUpValues: Statement<NewWorkflow>;
  supersede: Statement<SupersedeContext>;
  /** On Citus, `supersede` as router statements: the holders locked, then the new workflow (see `supersedeEndSpec`). */
  supersedeHolders: Statement<NewWorkflow>;
  insertSuperseding: Statement<{ workflow: NewWorkflow; supersedes: string | null }>;
}

/**
 * The statements that insert new workflow rows (one, a batch, a follow-up), their column lists and values made from
 * `newWorkflowColumns` and `NEW_WORKFLOW_INPUTS`, so that a column and its value cannot drift apart. One row names
 * its inputs as parameters, a batch as `unnest` columns of one array parameter each.
 */
export function insertStatements(tables: WorkflowTables, citus = false): InsertStatements {
  const byRows = new Map<number, Statement<NewWorkflow[]>>();
  return {
    one: insertOneStatement(tables, citus),
    many: insertManyStatement(tables, true, batchInputs()),
    manyGenerated: insertManyStatement(tables, false, batchInputs()),
    lone: insertManyStatement(tables, true, loneInputs()),
    loneGenerated: insertLoneGeneratedStatement(tables),
    rowsOfOneQueue(rows) {
      let statement = byRows.get(rows);
      if (!statement) byRows.set(rows, (statement = rowsOfOneQueueStatement(tables, rows)));
      return statement;
    },
    followUp: insertFollowUpStatement(tables),
    followUpHolder: followUpHolderStatement(tables.active),
    followUpValues: followUpValuesStatement(tables.active),
    supersede: supersedeStatement(tables),
    supersedeHolders: supersedeHoldersStatement(tables),
    insertSuperseding: insertSupersedingStatement(tables),
  };
}

/** The most rows one multi-row insert of `rowsOfOneQueue` holds: a batch of more goes in several statements. */
export const MAX_ROWS_PER_ROUTER_INSERT = 64;

/**
 * On Citus: `rows` new rows of one queue as one multi-row `INSERT … VALUES` whose queue is one parameter, so that
 * Citus plans a router insert to the queue's node (an `INSERT … SELECT` over `unnest` is planned through the
 * coordinator, which pulls the rows there and sends them back); returns the IDs inserted. What became of the others
 * is read by `holdersOnOneQueueSql`; the wake-up is the caller's (`sendWakeUpsLeftToCaller`), as a NOTIFY must be sent
 * on the coordinator. The rows go in in the order given: the caller sorts them by key (see `insertMany`).
 */
function rowsOfOneQueueStatement(tables: WorkflowTables, rows: number): Statement<NewWorkflow[]> {
  const params = new SqlParameters<NewWorkflow[]>();
  const queue = params.ref('queue_name', NEW_WORKFLOW_INPUTS.queue_name.type, (workflows) => workflows[0].queueName);
  const values = Array.from({ length: rows }, (_, row) =>
    newWorkflowColumns((name) =>
      name === 'queue_name'
        ? queue
        : params.ref(`${name}_${row}`, NEW_WORKFLOW_INPUTS[name].type, (workflows) =>
            NEW_WORKFLOW_INPUTS[name].value(workflows[row]),
          ),
    ),
  );
  const sql = `INSERT INTO ${tables.active} (${Object.keys(values[0]).join(', ')})
     VALUES ${values.map((columns) => `(${Object.values(columns).join(', ')})`).join(',\n       ')}
     ON CONFLICT DO NOTHING
     RETURNING ${READY_ROW_COLUMNS}`;
  return { sql, params };
}

/**
 * What a refused duplicate reports about its holder, as columns of an active row (unqualified, so that they can be
 * selected or returned): `status` as reported (DELAYED when due later), `not_before`, `dedup_expires_at`,
 * `workflow_name`, `workflow_version`, and `waiting` when it waits to be claimed (queued, delayed or waiting).
 */
export const HOLDER_REPORT_COLUMNS_SQL = `${REPORTED_STATUS_SQL} AS status, not_before, dedup_expires_at, workflow_name,
       workflow_version, status IN (${STATUS_SQL.ENQUEUED}, ${STATUS_SQL.WAITING}) AS waiting`;

/** The names of `HOLDER_REPORT_COLUMNS_SQL`'s columns. */
const HOLDER_REPORT_COLUMNS = [
  'status',
  'not_before',
  'dedup_expires_at',
  'workflow_name',
  'workflow_version',
  'waiting',
] as const;

/** The holder's report as the `holder_*` columns a refused row returns, each column's value given by `value`. */
function holderColumnsSql(value: (column: (typeof HOLDER_REPORT_COLUMNS)[number]) => string, separator = ', '): string {
  return HOLDER_REPORT_COLUMNS.map((column) => `${value(column)} AS holder_${column}`).join(separator);
}

/**
 * On Citus, after `rowsOfOneQueue`: the active rows of queue $1 with an ID of $2 or holding a key of $3, with what a
 * refused duplicate reports about its holder (`HOLDER_REPORT_COLUMNS_SQL`).
 */
export function holdersOnOneQueueSql(tables: WorkflowTables): string {
  return `SELECT workflow_id, active_deduplication_id, ${HOLDER_REPORT_COLUMNS_SQL} FROM ${tables.active}
    WHERE queue_name = $1 AND (workflow_id = ANY($2::text[])
      OR (active_deduplication_id = ANY($3::text[]) AND ${windowOpenSql()}))`;
}

/**
 * `holdersOnOneQueueSql` for a batch whose workflow IDs are all generated (new by construction, as for
 * `manyGenerated`): the holders of the keys $2 in queue $1 only, read through the key's unique index alone (the `OR`
 * form plans both indexes; docs/citus.md, "W1 on Citus").
 */
export function keyHoldersOnOneQueueSql(tables: WorkflowTables): string {
  return `SELECT workflow_id, active_deduplication_id, ${HOLDER_REPORT_COLUMNS_SQL} FROM ${tables.active}
    WHERE queue_name = $1 AND active_deduplication_id = ANY($2::text[]) AND ${windowOpenSql()}`;
}

/**
 * Whether a workflow ID given by the caller names a workflow already, other than an active one of the same queue
 * (which ON CONFLICT finds): a finished one, or one of another queue. Generated IDs are new by construction.
 */
function takenElsewhereSql(tables: WorkflowTables, id: string, given: string, queue: string): string {
  return `(${given} AND (EXISTS (SELECT 1 FROM ${tables.history} AS h WHERE h.workflow_id = ${id})
       OR EXISTS (SELECT 1 FROM ${tables.active} AS a WHERE a.workflow_id = ${id} AND a.queue_name <> ${queue})))`;
}

function parameterOf<C>(params: SqlParameters<C>, value: (context: C) => NewWorkflow) {
  return (name: NewWorkflowInputName) =>
    params.ref(name, NEW_WORKFLOW_INPUTS[name].type, (context) => NEW_WORKFLOW_INPUTS[name].value(value(context)));
}

function insertOneStatement(tables: WorkflowTables, citus: boolean): InsertStatements['one'] {
  const params = new SqlParameters<{ workflow: NewWorkflow; channel: string }>();
  const input = parameterOf(params, (context) => context.workflow);
  const columns = newWorkflowColumns(input);
  // NOTE: on Citus a router insert (`INSERT … VALUES`, no CTE): its wake-up is the caller's, sent on the coordinator
  // (`sendWakeUpsLeftToCaller`), and a given ID taken elsewhere is found afterwards (`takeBackTaken`).
  if (citus) {
    const sql = `INSERT INTO ${tables.active} (${Object.keys(columns).join(', ')})
       VALUES (${Object.values(columns).join(', ')})
       ON CONFLICT (workflow_id, queue_name) DO NOTHING
       RETURNING ${READY_ROW_COLUMNS}`;
    return { sql, params };
  }
  const channel = params.ref('wake_up_channel', 'text', (context) => context.channel);
  // NOTE: ::text, as a void column is refused by Prisma's raw queries (a caller's transaction, `fromPrisma`).
  const sql = `WITH inserted AS (
       INSERT INTO ${tables.active} (${Object.keys(columns).join(', ')})
       SELECT ${Object.values(columns).join(', ')}
       WHERE NOT ${takenElsewhereSql(tables, input('workflow_id'), input('workflow_id_given'), input('queue_name'))}
       ON CONFLICT (workflow_id, queue_name) DO NOTHING
       RETURNING ${READY_ROW_COLUMNS}
     ),
     ready AS (${insertReadyRowsSql(tables.ready, 'inserted', true)})
     SELECT pg_notify(${channel}, queue_name)::text FROM inserted`;
  return { sql, params };
}

/** What a batch statement reads its rows from: the `input` CTE's query (with `ord`), its parameters, the channel. */
interface BatchInputs {
  params: SqlParameters<{ workflows: NewWorkflow[]; channel: string }>;
  inputSql: string;
  channel: string;
}

/** The rows of a batch: one array parameter per input, `unnest`ed with their order. */
function batchInputs(): BatchInputs {
  const params = new SqlParameters<{ workflows: NewWorkflow[]; channel: string }>();
  const arrays = NEW_WORKFLOW_INPUT_NAMES.map((name) => {
    const { type, value } = NEW_WORKFLOW_INPUTS[name];
    return params.ref(name, `${type}[]`, (context) =>
      type === 'timestamptz'
        ? context.workflows.map((workflow) => value(workflow))
        : arrayParameter(context.workflows, value as (workflow: NewWorkflow) => string | number | boolean | null),
    );
  });
  const channel = params.ref('wake_up_channel', 'text', (context) => context.channel);
  const inputSql = `SELECT * FROM unnest(${arrays.join(', ')})
         WITH ORDINALITY AS i(${NEW_WORKFLOW_INPUT_NAMES.join(', ')}, ord)`;
  return { params, inputSql, channel };
}

/** The row of a batch of one: a scalar parameter per input, under the names and types `batchInputs` gives. */
function loneInputs(): BatchInputs {
  const params = new SqlParameters<{ workflows: NewWorkflow[]; channel: string }>();
  const selected = NEW_WORKFLOW_INPUT_NAMES.map((name) => {
    const { type, value } = NEW_WORKFLOW_INPUTS[name];
    return `${params.ref(name, type, (context) => value(context.workflows[0]))} AS ${name}`;
  });
  const channel = params.ref('wake_up_channel', 'text', (context) => context.channel);
  return { params, inputSql: `SELECT ${selected.join(', ')}, 1::bigint AS ord`, channel };
}

/**
 * Many rows in one statement, as `unnest` columns (see `WorkflowInserter.insertMany`). With `givenIds`, a row not
 * inserted is looked up by its workflow ID (a probe of the active table and of every day of the history) when the
 * caller gave the ID. Without, every ID is generated, so new by construction, and a row not inserted was refused for
 * its key: the statement leaves the look-up out. The look-up names the view over the active table and every day of
 * the history, which a generic plan opens and locks at each execution, used or not: it made the statement take twice
 * as long (W1 in docs/performance.md).
 *
 * A row refused for its key comes back with its holder and what the refusal reports about it (`holder_*`, see
 * `HOLDER_REPORT_COLUMNS_SQL`): a row of the same batch that took the key, else the holder the statement's snapshot
 * sees. NOTE: a holder that committed after the snapshot (ON CONFLICT waited for it and saw it) is invisible to the
 * statement's reads: its row comes back with no holder, and the caller looks it up afresh (`findHolder`).
 */
function insertManyStatement(
  tables: WorkflowTables,
  givenIds: boolean,
  { params, inputSql, channel }: BatchInputs,
): InsertStatements['many'] {
  const columns = newWorkflowColumns((name) => name);
  const sql = `WITH input AS (
       ${inputSql}
     ),
     inserted AS (
       INSERT INTO ${tables.active} (${Object.keys(columns).join(', ')})
       SELECT ${Object.values(columns).join(', ')}
       FROM input
       ${givenIds ? `WHERE NOT ${takenElsewhereSql(tables, 'input.workflow_id', 'input.workflow_id_given', 'input.queue_name')}` : ''}
       ORDER BY queue_name, deduplication_id, ord
       ON CONFLICT DO NOTHING
       RETURNING workflow_id, queue_name, active_deduplication_id, priority, seq, partition_key,
                 ${HOLDER_REPORT_COLUMNS_SQL}
     ),
     ready AS (${insertReadyRowsSql(tables.ready, 'inserted', true)}),
     woken AS (SELECT pg_notify(${channel}, queue_name)::text FROM (SELECT DISTINCT queue_name FROM inserted) AS q)
     SELECT (ins.workflow_id IS NOT NULL) AS inserted, i.deduplication_id,
            existing.queue_name AS existing_queue, existing.workflow_name AS existing_workflow,
            coalesce(in_batch.workflow_id, holder.workflow_id) AS holder_id,
            ${holderColumnsSql(
              (column) =>
                `CASE WHEN in_batch.workflow_id IS NOT NULL THEN in_batch.${column} ELSE holder.${column} END`,
              ',\n            ',
            )},
            (SELECT count(*) FROM woken) AS woken
     FROM input AS i
     LEFT JOIN inserted AS ins ON ins.workflow_id = i.workflow_id
     LEFT JOIN LATERAL (${
       givenIds
         ? `SELECT w.queue_name, w.workflow_name FROM ${tables.workflows} AS w
       WHERE ins.workflow_id IS NULL AND i.workflow_id_given AND w.workflow_id = i.workflow_id
       ORDER BY w.queue_name = i.queue_name DESC LIMIT 1`
         : 'SELECT NULL::text AS queue_name, NULL::text AS workflow_name'
     }) AS existing ON true
     LEFT JOIN LATERAL (
       SELECT workflow_id, ${HOLDER_REPORT_COLUMNS_SQL} FROM ${tables.active} AS h
       WHERE ins.workflow_id IS NULL AND h.queue_name = i.queue_name AND h.active_deduplication_id = i.deduplication_id
         AND ${windowOpenSql('h.')}
     ) AS holder ON true
     LEFT JOIN inserted AS in_batch ON ins.workflow_id IS NULL AND in_batch.queue_name = i.queue_name
       AND in_batch.active_deduplication_id = i.deduplication_id
     ORDER BY i.ord`;
  return { sql, params };
}

/**
 * One new row whose workflow ID was generated (a lone enqueue call's), as an `INSERT … VALUES` with its wake-up, and
 * its key's holder read only when the row was not inserted: a branch that an inserted row's execution skips. It
 * returns one row when inserted (`inserted` true, the `holder_*` columns null); one row with the holder and its
 * report (`HOLDER_REPORT_COLUMNS_SQL` as `holder_*`) when refused by a holder its snapshot sees; no row when refused
 * by a holder it cannot see (one that committed after its snapshot, or whose window is over), which the caller looks
 * up afresh (`findHolder`). NOTE: `manyGenerated`'s shape for one row, its inputs, joins and counts, cost the server
 * 130 µs more per call on its generic plan (docs/performance.md, "The lone call's p50").
 */
function insertLoneGeneratedStatement(tables: WorkflowTables): InsertStatements['loneGenerated'] {
  const params = new SqlParameters<{ workflows: NewWorkflow[]; channel: string }>();
  const input = parameterOf(params, (context) => context.workflows[0]);
  const columns = newWorkflowColumns(input);
  const channel = params.ref('wake_up_channel', 'text', (context) => context.channel);
  const sql = `WITH inserted AS (
       INSERT INTO ${tables.active} (${Object.keys(columns).join(', ')})
       VALUES (${Object.values(columns).join(', ')})
       ON CONFLICT DO NOTHING
       RETURNING ${READY_ROW_COLUMNS}
     ),
     ready AS (${insertReadyRowsSql(tables.ready, 'inserted', true)}),
     woken AS (SELECT pg_notify(${channel}, queue_name)::text FROM inserted)
     SELECT true AS inserted, NULL AS holder_id, ${holderColumnsSql(() => 'NULL')} FROM woken
     UNION ALL
     SELECT false, workflow_id, ${holderColumnsSql((column) => column)}
     FROM (SELECT workflow_id, ${HOLDER_REPORT_COLUMNS_SQL} FROM ${tables.active}
           WHERE NOT EXISTS (SELECT FROM inserted) AND queue_name = ${input('queue_name')}
             AND active_deduplication_id = ${input('deduplication_id')} AND ${windowOpenSql()}) AS holder`;
  return { sql, params };
}

/** The columns of a follow-up: it holds the key's "next" slot instead of the key, and is not due until the hand-over. */
function followUpColumns(input: (name: NewWorkflowInputName) => string): Record<string, string> {
  return newWorkflowColumns(input, {
    active_deduplication_id: 'NULL',
    not_before: "'infinity'",
    next_deduplication_id: input('deduplication_id'),
  });
}

/** The started holder of a follow-up's key, its queue's and key's parameters named by `input`. */
function startedHolderSql(table: string, input: (name: NewWorkflowInputName) => string): string {
  return `SELECT workflow_id FROM ${table}
       WHERE queue_name = ${input('queue_name')} AND active_deduplication_id = ${input('deduplication_id')}
         AND (status IN (${STATUS_SQL.PENDING}, ${STATUS_SQL.WAITING}, ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED})
              OR (status = ${STATUS_SQL.ENQUEUED} AND attempts > 0))
       FOR SHARE`;
}

/** A follow-up, inserted while its key's holder has started (locked `FOR SHARE` until the insert commits). */
function insertFollowUpStatement(tables: WorkflowTables): InsertStatements['followUp'] {
  const params = new SqlParameters<NewWorkflow>();
  const input = parameterOf(params, (workflow) => workflow);
  const columns = followUpColumns(input);
  const sql = `WITH holder AS (
       ${startedHolderSql(tables.active, input)}
     ),
     inserted AS (
       INSERT INTO ${tables.active} (${Object.keys(columns).join(', ')})
       SELECT ${Object.values(columns).join(', ')}
       WHERE EXISTS (SELECT 1 FROM holder)
       ON CONFLICT DO NOTHING
       RETURNING ${READY_ROW_COLUMNS}
     ),
     ready AS (${insertReadyRowsSql(tables.ready, 'inserted', true)})
     SELECT (SELECT workflow_id FROM inserted) AS workflow_id, EXISTS (SELECT 1 FROM holder) AS holder_running`;
  return { sql, params };
}

/** On Citus, the first statement of a follow-up's insert (see `InsertStatements.followUpHolder`). */
function followUpHolderStatement(table: string): Statement<NewWorkflow> {
  const params = new SqlParameters<NewWorkflow>();
  return {
    sql: startedHolderSql(
      table,
      parameterOf(params, (workflow) => workflow),
    ),
    params,
  };
}

/** On Citus, the second statement of a follow-up's insert (see `InsertStatements.followUpHolder`). */
function followUpValuesStatement(table: string): Statement<NewWorkflow> {
  const params = new SqlParameters<NewWorkflow>();
  const columns = followUpColumns(parameterOf(params, (workflow) => workflow));
  const sql = `INSERT INTO ${table} (${Object.keys(columns).join(', ')})
     VALUES (${Object.values(columns).join(', ')})
     ON CONFLICT DO NOTHING
     RETURNING ${READY_ROW_COLUMNS}`;
  return { sql, params };
}

/**
 * `onDuplicate: 'supersede'` in one statement: locks the key's holder and its waiting follow-up (`FOR UPDATE`), ends
 * both CANCELLED through `endWorkflowsSql` (naming the new workflow in `superseded_by`), clears an expired window's
 * key record, and inserts the new workflow holding the key (naming the holder in `supersedes`). Nothing is ended or
 * inserted when the key is held by a finished workflow within its deduplication window (`window_held`), when
 * `requireSameArgs` and the holder's stored arguments differ (`mismatch`), or when the caller's workflow ID names a
 * workflow already (`id_taken`). NOTE: the holder is locked first, so no other call can end it or take its key until
 * this commits; an insert that still finds the key taken (a free key taken meanwhile) returns no `inserted_id`, and
 * the caller rolls back whatever was ended and tries again. The insert reads `ended` so that it runs after the
 * holder's row is gone (the unique index then allows the key). The cancel notifications are sent by the caller, in
 * a statement of their own. On Citus the same steps are router statements (`DuplicatePolicyStore`'s
 * `supersedeOnItsNode`), the holders ending through `runEndStatements`.
 */
function supersedeStatement(tables: WorkflowTables): InsertStatements['supersede'] {
  const params = new SqlParameters<SupersedeContext>();
  const input = parameterOf(params, (context) => context.workflow);
  const queue = input('queue_name');
  const key = input('deduplication_id');
  const id = input('workflow_id');
  const requireSameArgs = params.ref('require_same_args', 'bool', (context) => context.requireSameArgs);
  const channel = params.ref('wake_up_channel', 'text', (context) => context.channel);
  const columns = newWorkflowColumns(input, {
    supersedes: '(SELECT workflow_id FROM ended WHERE held_key)',
  });
  const proceeds = 'NOT (SELECT window_held OR mismatch OR id_taken FROM blocked)';
  const sql = `WITH holders AS (
       ${supersededHoldersSql(tables, queue, key, input('inputs'))}
     ),
     blocked AS (
       SELECT EXISTS (SELECT 1 FROM holders WHERE held_key AND NOT unfinished AND window_open) AS window_held,
              ${requireSameArgs} AND EXISTS (SELECT 1 FROM holders
                                               WHERE held_key AND (unfinished OR window_open) AND NOT same_args)
                AS mismatch,
              ${takenElsewhereSql(tables, id, input('workflow_id_given'), queue)}
                OR EXISTS (SELECT 1 FROM ${tables.active} WHERE queue_name = ${queue} AND workflow_id = ${id})
                AS id_taken
     ),
     expired AS (
       DELETE FROM ${tables.active} AS x USING holders AS h
       WHERE x.queue_name = ${queue} AND x.workflow_id = h.workflow_id AND h.held_key AND NOT h.unfinished
         AND NOT h.window_open
       RETURNING x.workflow_id
     ),
     ${endWorkflowsSql({
       ...supersedeEndSpec(tables, false, queue, id, channel),
       using: 'holders AS h',
       where: `w.queue_name = ${queue} AND w.workflow_id = h.workflow_id AND h.unfinished AND ${proceeds}`,
       returning: 'h.held_key',
     })},
     inserted AS (
       INSERT INTO ${tables.active} (${Object.keys(columns).join(', ')})
       SELECT ${Object.values(columns).join(', ')}
       WHERE ${proceeds} AND (SELECT count(*) FROM ended) + (SELECT count(*) FROM expired) >= 0
       ON CONFLICT DO NOTHING
       RETURNING ${READY_ROW_COLUMNS}
     ),
     ready AS (${insertReadyRowsSql(tables.ready, 'inserted', true)})
     SELECT (SELECT workflow_id FROM inserted) AS inserted_id, b.window_held, b.mismatch, b.id_taken,
            (SELECT workflow_id FROM holders WHERE held_key AND (unfinished OR window_open)) AS holder_id,
            coalesce((SELECT json_agg(json_build_object('workflowId', workflow_id, 'workflowName', workflow_name,
                                                        'attempt', attempts, 'heldKey', held_key))
                      FROM ended), '[]'::json) AS ended,
            ${ENDED_WAKE_UPS_SQL} AS handed_over
     FROM blocked AS b`;
  return { sql, params };
}

/**
 * The rows holding `key` in `queue` or waiting for it (its holder and its follow-up), locked, with what `supersede`
 * decides by: whether each holds the key, is unfinished, is within its deduplication window, and has the same
 * arguments as `inputs`.
 */
function supersededHoldersSql(tables: WorkflowTables, queue: string, key: string, inputs: string): string {
  return `SELECT workflow_id, active_deduplication_id IS NOT NULL AS held_key, status IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL} AS unfinished,
              ${windowOpenSql()} AS window_open, inputs::jsonb = ${inputs}::jsonb AS same_args
       FROM ${tables.active}
       WHERE queue_name = ${queue} AND (active_deduplication_id = ${key} OR next_deduplication_id = ${key})
       FOR UPDATE`;
}

/**
 * How `supersede` ends the unfinished holders: CANCELLED, naming the new workflow `id` in `superseded_by`. On Citus
 * (the defaults): the rows of the IDs `$2` in queue `$1`, for the new workflow `$3`, with the wake-up channel `$4`;
 * the single statement gives its own `where`.
 */
export function supersedeEndSpec(
  tables: WorkflowTables,
  citus = true,
  queue = '$1::text',
  id = '$3::text',
  channel = '$4::text',
): EndSpec {
  return {
    tables,
    where: `w.queue_name = ${queue} AND w.workflow_id = ANY($2::text[])`,
    status: STATUS_SQL.CANCELLED,
    overrides: { superseded_by: id },
    channelParam: channel,
    citus,
    queueParam: queue,
  };
}

/** On Citus, the first statement of `supersede`: the key's holders, locked (`supersededHoldersSql`). */
function supersedeHoldersStatement(tables: WorkflowTables): InsertStatements['supersedeHolders'] {
  const params = new SqlParameters<NewWorkflow>();
  const input = parameterOf(params, (workflow) => workflow);
  return { sql: supersededHoldersSql(tables, input('queue_name'), input('deduplication_id'), input('inputs')), params };
}

/** On Citus, the new workflow of `supersede`, naming the ended holder of the key; none if a row took the key or ID. */
function insertSupersedingStatement(tables: WorkflowTables): InsertStatements['insertSuperseding'] {
  const params = new SqlParameters<{ workflow: NewWorkflow; supersedes: string | null }>();
  const columns = newWorkflowColumns(
    parameterOf(params, (context) => context.workflow),
    { supersedes: params.ref('supersedes', 'text', (context) => context.supersedes) },
  );
  const sql = `INSERT INTO ${tables.active} (${Object.keys(columns).join(', ')})
     VALUES (${Object.values(columns).join(', ')})
     ON CONFLICT DO NOTHING
     RETURNING ${READY_ROW_COLUMNS}`;
  return { sql, params };
}
