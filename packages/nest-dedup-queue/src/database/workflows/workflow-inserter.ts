import type { TransactionSql } from '../../interfaces/transaction-sql.interface';
import type { WorkflowStatus } from '../../interfaces/workflow-status.interface';
import type { QueueDatabase } from '../connection/queue-database';
import {
  HOLDER_REPORT_COLUMNS_SQL,
  InsertStatements,
  MAX_ROWS_PER_ROUTER_INSERT,
  SupersededHolderRow,
  holdersOnOneQueueSql,
  keyHoldersOnOneQueueSql,
  insertStatements,
  supersedeEndSpec,
} from './workflow-insert.statements';
import { isUniqueViolationOn } from '../connection/sql-errors';
import { interruptPayload } from './interrupt-payload';
import { releaseExpiredKeySql, runEndStatements, windowOpenSql } from './workflow-finish.sql';
import type { NewWorkflow } from './new-workflow';
import {
  type EarlyRefusals,
  type Holder,
  type HolderReport,
  type HolderReportRow,
  type InsertResult,
  type InsertedRow,
  type LoneInsertedRow,
  type SendResult,
  type SupersedeResult,
  type SupersededWorkflow,
  holderReportOf,
  holderStateOf,
  insertResultOf,
  loneResultOf,
  refusedBeforeTheBatch,
} from './insert-results';
import { ACTIVE_STATUSES_SQL, ACTIVE_TABLE_WORKFLOW_STATUSES_SQL, STATUS_SQL } from '../tables/workflow-status.sql';
import { ACTIVE_WORKFLOW_STATUSES } from '../../interfaces/workflow-status.interface';
import type { DeduplicationHolderState } from '../../errors/queue-deduplicated.error';
import { REPORTED_STATUS_SQL } from './workflow-row';
import { ACTIVE_DEDUPLICATION_INDEX, WorkflowTables, workflowTables } from '../tables/workflow-tables';
import { countAndWakeSql } from '../messages/message.store';
import { sendWakeUpsLeftToCaller } from '../connection/wake-ups.sql';

type Query = <R = Record<string, unknown>>(sql: string, params?: unknown[]) => Promise<R[]>;

/** Rolls back a supersede whose insert found the key taken after all. */
class SupersedeLost extends Error {}

const statementsBySchema = new Map<string, InsertStatements>();

/**
 * The SQL of enqueueing: one workflow (a unique violation on the partial index means its deduplication ID is held),
 * many in one statement (ON CONFLICT DO NOTHING; the same index decides each row), and what the duplicate policies
 * need: the holder of a key, replacing a queued holder's arguments, and the single follow-up of a running one.
 * Bound to the module's pool, or with `inTransaction` to a caller's transaction, where each insert runs under a
 * savepoint so that a duplicate does not abort the caller's transaction.
 */
export class WorkflowInserter {
  private readonly tables: WorkflowTables;
  private readonly table: string;

  constructor(
    private readonly database: QueueDatabase,
    private readonly query: Query = (sql, params) => database.query(sql, params, { prepared: true, idempotent: true }),
    private readonly savepoints = false,
  ) {
    this.tables = workflowTables(database.schemaSql);
    this.table = this.tables.active;
  }

  /** The same statements, run inside the caller's transaction `db`. */
  inTransaction(db: TransactionSql): WorkflowInserter {
    const query: Query = async <R>(sql: string, params: unknown[] = []) => {
      try {
        return (await db.executeSql(sql, params)).rows as R[];
      } catch (error) {
        throw this.database.classify(error);
      }
    };
    return new WorkflowInserter(this.database, query, true);
  }

  async insert(workflow: NewWorkflow): Promise<InsertResult> {
    try {
      const { sql, params } = this.statements.one;
      const result = await this.guarded(async () => {
        const rows = await this.query(sql, params.values({ workflow, channel: this.database.wakeUpChannel }));
        if (rows.length !== 1) return undefined;
        await sendWakeUpsLeftToCaller(this.database, [workflow.queueName], this.query);
        const [checked] = await this.takeBackTaken(this.query, [workflow], [{ outcome: 'inserted' }]);
        return checked;
      });
      if (result) return result;
    } catch (error) {
      if (isUniqueViolationOn(error, ACTIVE_DEDUPLICATION_INDEX)) return { outcome: 'deduplicated' };
      throw error;
    }
    return this.existing(workflow);
  }

  /**
   * Inserts many workflows in one statement and tells, for each in order, what happened. Duplicates within the
   * batch are decided by the index like any other: the first row wins. Workflow IDs must be distinct in a batch.
   * NOTE: rows go in in key order, so that concurrent batches over the same keys take their index locks in the
   * same order instead of deadlocking; a holder whose window expired is left to `findHolder` to clear.
   * `beforeCommit`, for a batch of several on the module's own connections to one server: called once, as soon as
   * the statement's rows arrive, before the batch's commit and its flush to disk (which only the batch's inserted
   * rows need), with the refusals whose holder committed before the batch (true whatever becomes of the batch's
   * commit) by position. NOTE: it costs the statement a round trip (the commit is asked for once the rows are in), so
   * a lone call, which has no other call's flush to wait for, does without it.
   */
  async insertMany(workflows: NewWorkflow[], beforeCommit?: (refused: EarlyRefusals) => void): Promise<InsertResult[]> {
    if (!workflows.some((workflow) => workflow.workflowIdGiven)) {
      const early = workflows.length > 1 && !this.savepoints ? beforeCommit : undefined;
      return this.insertManyWith(this.query, workflows, early);
    }
    const insertAndCheck = async (query: Query) =>
      this.takeBackTaken(query, workflows, await this.insertManyWith(query, workflows));
    return this.savepoints ? insertAndCheck(this.query) : this.database.transaction(insertAndCheck);
  }

  /**
   * After an insert, in its transaction: takes back each inserted workflow whose ID, given by the caller, names
   * another workflow by now (one that finished, or of another queue), and reports it as that workflow. NOTE: the
   * insert's snapshot may predate that workflow's finish, which moved it from the active table to the history while
   * the insert waited on its row; this statement, with a snapshot of its own, sees it (READ COMMITTED).
   */
  private async takeBackTaken(
    query: Query,
    workflows: NewWorkflow[],
    results: InsertResult[],
  ): Promise<InsertResult[]> {
    const inserted = workflows.filter((workflow, at) => workflow.workflowIdGiven && results[at].outcome === 'inserted');
    if (inserted.length === 0) return results;
    const taken = this.database.citus
      ? await this.takeBackTakenByQueue(query, inserted)
      : await query<{ workflow_id: string; queue_name: string; workflow_name: string }>(
          `WITH mine AS (SELECT * FROM unnest($1::text[], $2::text[]) AS m(workflow_id, queue_name)),
       other AS (
         SELECT m.workflow_id, m.queue_name AS my_queue, o.queue_name, o.workflow_name
         FROM mine AS m
         CROSS JOIN LATERAL (
           SELECT w.queue_name, w.workflow_name FROM ${this.tables.workflows} AS w
           WHERE w.workflow_id = m.workflow_id AND (w.queue_name <> m.queue_name OR w.status NOT IN ${ACTIVE_STATUSES_SQL})
           ORDER BY w.queue_name = m.queue_name DESC LIMIT 1
         ) AS o
       ),
       taken_back AS (
         DELETE FROM ${this.table} AS a USING other
         WHERE a.queue_name = other.my_queue AND a.workflow_id = other.workflow_id AND a.attempts = 0
       )
       SELECT workflow_id, queue_name, workflow_name FROM other`,
          [inserted.map((workflow) => workflow.workflowId), inserted.map((workflow) => workflow.queueName)],
        );
    const existing = new Map(taken.map((row) => [row.workflow_id, row]));
    return results.map((result, at) => {
      const other =
        workflows[at].workflowIdGiven && result.outcome === 'inserted' && existing.get(workflows[at].workflowId);
      return other
        ? {
            outcome: 'duplicate-workflow-id',
            existing: { queueName: other.queue_name, workflowName: other.workflow_name },
          }
        : result;
    });
  }

  /**
   * On Citus, `takeBackTaken`'s look-up and take-back as statements Citus plans: the look-up by bare workflow IDs
   * (every node: the caller gave IDs, not where they live), then a delete per queue on its node.
   */
  private async takeBackTakenByQueue(
    query: Query,
    inserted: NewWorkflow[],
  ): Promise<Array<{ workflow_id: string; queue_name: string; workflow_name: string }>> {
    const rows = await query<{ workflow_id: string; queue_name: string; workflow_name: string; status: string }>(
      `SELECT workflow_id, queue_name, workflow_name, status FROM ${this.tables.workflows}
       WHERE workflow_id = ANY($1::text[])`,
      [inserted.map((workflow) => workflow.workflowId)],
    );
    const taken: Array<{ workflow_id: string; queue_name: string; workflow_name: string; my_queue: string }> = [];
    for (const workflow of inserted) {
      const other = rows
        .filter(
          (row) =>
            row.workflow_id === workflow.workflowId &&
            (row.queue_name !== workflow.queueName ||
              !(ACTIVE_WORKFLOW_STATUSES as readonly string[]).includes(row.status)),
        )
        .sort((a, b) => Number(b.queue_name === workflow.queueName) - Number(a.queue_name === workflow.queueName))[0];
      if (other) taken.push({ ...other, my_queue: workflow.queueName });
    }
    for (const queueName of new Set(taken.map((row) => row.my_queue))) {
      await query(
        `DELETE FROM ${this.table} WHERE queue_name = $1 AND workflow_id = ANY($2::text[]) AND attempts = 0`,
        [queueName, taken.filter((row) => row.my_queue === queueName).map((row) => row.workflow_id)],
      );
    }
    return taken;
  }

  private async insertManyWith(
    query: Query,
    workflows: NewWorkflow[],
    beforeCommit?: (refused: EarlyRefusals) => void,
  ): Promise<InsertResult[]> {
    if (this.database.citus) return this.insertManyByQueue(query, workflows);
    const given = workflows.some((workflow) => workflow.workflowIdGiven);
    const { lone, loneGenerated, many, manyGenerated } = this.statements;
    const context = { workflows, channel: this.database.wakeUpChannel };
    if (workflows.length === 1 && !given) {
      const [row] = await query<LoneInsertedRow>(loneGenerated.sql, loneGenerated.params.values(context));
      return [loneResultOf(row, workflows[0])];
    }
    const { sql, params } = workflows.length === 1 ? lone : given ? many : manyGenerated;
    const values = params.values(context);
    const rows = beforeCommit
      ? await this.database.queryWithRowsBeforeCommit<InsertedRow>(
          sql,
          values,
          { prepared: true, idempotent: true },
          (sentRows) => beforeCommit(refusedBeforeTheBatch(workflows, sentRows.map(insertResultOf))),
        )
      : await query<InsertedRow>(sql, values);
    return rows.map(insertResultOf);
  }

  /**
   * On Citus: the batch's rows one queue at a time, each queue's statements on its node (router inserts of at most
   * `MAX_ROWS_PER_ROUTER_INSERT` rows, in key order as on one server, then, if some rows were not inserted, a read
   * of what holds their keys or IDs in that queue), then one wake-up of the queues that got rows, on the
   * coordinator; results in the batch's order.
   */
  private async insertManyByQueue(query: Query, workflows: NewWorkflow[]): Promise<InsertResult[]> {
    const results: InsertResult[] = [];
    const byQueue = new Map<string, number[]>();
    workflows.forEach((workflow, at) =>
      byQueue.set(workflow.queueName, [...(byQueue.get(workflow.queueName) ?? []), at]),
    );
    const woken: string[] = [];
    for (const [queueName, positions] of byQueue) {
      const batch = positions.map((at) => workflows[at]);
      const inserted = new Set<string>();
      const inKeyOrder = [...batch].sort(byDeduplicationId);
      for (let from = 0; from < inKeyOrder.length; from += MAX_ROWS_PER_ROUTER_INSERT) {
        const rows = inKeyOrder.slice(from, from + MAX_ROWS_PER_ROUTER_INSERT);
        const { sql, params } = this.statements.rowsOfOneQueue(rows.length);
        for (const row of await query<{ workflow_id: string }>(sql, params.values(rows))) inserted.add(row.workflow_id);
      }
      if (inserted.size > 0) woken.push(queueName);
      const others = batch.filter((workflow) => !inserted.has(workflow.workflowId));
      const found = others.length === 0 ? [] : await this.holdersOnOneQueue(query, queueName, others);
      positions.forEach((at, index) => {
        const workflow = batch[index];
        if (inserted.has(workflow.workflowId)) {
          results[at] = { outcome: 'inserted' };
          return;
        }
        const same = found.find((row) => row.workflow_id === workflow.workflowId);
        if (same) {
          results[at] = {
            outcome: 'duplicate-workflow-id',
            existing: { queueName, workflowName: same.workflow_name },
          };
          return;
        }
        if (workflow.deduplicationId === null) {
          results[at] = { outcome: 'retry' };
          return;
        }
        const holder = found.find((row) => row.active_deduplication_id === workflow.deduplicationId);
        results[at] = holder
          ? { outcome: 'deduplicated', holderId: holder.workflow_id, holder: holderReportOf(holder) }
          : { outcome: 'deduplicated' };
      });
    }
    await sendWakeUpsLeftToCaller(this.database, woken, query);
    return results;
  }

  /**
   * On Citus, what holds the keys (or, for IDs given by the caller, the IDs) of `refused`, rows of `queueName` that a
   * router insert did not insert.
   */
  private holdersOnOneQueue(
    query: Query,
    queueName: string,
    refused: NewWorkflow[],
  ): Promise<Array<{ workflow_id: string; active_deduplication_id: string | null } & HolderReportRow>> {
    const keys = refused.flatMap((workflow) => (workflow.deduplicationId === null ? [] : [workflow.deduplicationId]));
    if (!refused.some((workflow) => workflow.workflowIdGiven)) {
      return query(keyHoldersOnOneQueueSql(this.tables), [queueName, keys]);
    }
    return query(holdersOnOneQueueSql(this.tables), [queueName, refused.map((workflow) => workflow.workflowId), keys]);
  }

  /**
   * What a refused duplicate tells about the key's holder: its reported status, a delayed one's start, a finished
   * one's window end. Read on the module's own connections (never in a caller's transaction, which a failed read
   * would abort); empty when the holder is gone or the read fails.
   */
  async holderState(queueName: string, workflowId: string): Promise<DeduplicationHolderState> {
    try {
      const [row] = await this.database.query<{
        status: WorkflowStatus;
        not_before: unknown;
        dedup_expires_at: unknown;
      }>(
        `SELECT ${REPORTED_STATUS_SQL} AS status, not_before, dedup_expires_at FROM ${this.table}
         WHERE queue_name = $1 AND workflow_id = $2`,
        [queueName, workflowId],
        { idempotent: true },
      );
      return row ? holderStateOf(row) : {};
    } catch {
      return {};
    }
  }

  /**
   * What refused duplicates tell about their holders, for many holders of one queue in one statement (one probe by
   * key each): the `holderState` of each, and its name and version when it waits to be claimed (queued, delayed or
   * waiting). Read on the module's own connections; a holder
   * that is gone has no entry. Throws when the read fails.
   */
  async holderReports(queueName: string, workflowIds: string[]): Promise<Map<string, HolderReport>> {
    const rows = await this.database.query<{ workflow_id: string } & HolderReportRow>(
      `SELECT workflow_id, ${HOLDER_REPORT_COLUMNS_SQL}
       FROM ${this.table} WHERE queue_name = $1 AND workflow_id = ANY($2::text[])`,
      [queueName, workflowIds],
      { prepared: true, idempotent: true },
    );
    return new Map(rows.map((row) => [row.workflow_id, holderReportOf(row)]));
  }

  /**
   * The workflow that holds a deduplication ID in a queue, if any. A holder whose deduplication window has passed
   * lets go of the key here (expired windows are cleared when someone wants the key, never by a sweep). With
   * `inputsJson`, the same statement tells whether the holder's stored arguments equal those (`sameArgs`).
   */
  async findHolder(queueName: string, deduplicationId: string, inputsJson?: string): Promise<Holder | undefined> {
    const holder = await this.findHolderWith(this.query, queueName, deduplicationId, inputsJson);
    if (holder || !this.savepoints) return holder;
    // A caller's REPEATABLE READ snapshot may predate the holder's commit: look with a fresh one.
    return this.findHolderWith(
      (sql, params) => this.database.query(sql, params, { idempotent: true }),
      queueName,
      deduplicationId,
      inputsJson,
    );
  }

  private async findHolderWith(
    query: Query,
    queueName: string,
    deduplicationId: string,
    inputsJson: string | undefined,
  ): Promise<Holder | undefined> {
    if (this.database.citus) return this.findHolderOnCitus(query, queueName, deduplicationId, inputsJson);
    const rows = await query<{ workflow_id: string; status: WorkflowStatus; attempts: number; same_args: boolean }>(
      `WITH expired AS (${releaseExpiredKeySql(this.table)})
       SELECT workflow_id, status, attempts, coalesce(inputs::jsonb = $3::jsonb, true) AS same_args FROM ${this.table}
       WHERE queue_name = $1 AND active_deduplication_id = $2 AND workflow_id NOT IN (SELECT workflow_id FROM expired)
         AND ${windowOpenSql()}`,
      [queueName, deduplicationId, inputsJson ?? null],
    );
    return (
      rows[0] && {
        workflowId: rows[0].workflow_id,
        status: rows[0].status,
        started: rows[0].attempts > 0,
        sameArgs: rows[0].same_args,
      }
    );
  }

  /**
   * On Citus, `findHolderWith` as statements that Citus plans on its fast path (the CTE `expired` of the one statement
   * sends it through the full planner): the key's record read (the unique index allows one per key), with whether its
   * deduplication window is over; only when it is, that record deleted by its ID, the DELETE rechecking the window,
   * and no holder returned, as the one statement does.
   */
  private async findHolderOnCitus(
    query: Query,
    queueName: string,
    deduplicationId: string,
    inputsJson: string | undefined,
  ): Promise<Holder | undefined> {
    const [row] = await query<{
      workflow_id: string;
      status: WorkflowStatus;
      attempts: number;
      same_args: boolean;
      expired: boolean;
    }>(
      `SELECT workflow_id, status, attempts, coalesce(inputs::jsonb = $3::jsonb, true) AS same_args,
              NOT ${windowOpenSql()} AS expired
       FROM ${this.table} WHERE queue_name = $1 AND active_deduplication_id = $2`,
      [queueName, deduplicationId, inputsJson ?? null],
    );
    if (!row) return undefined;
    if (row.expired) {
      await query(
        `DELETE FROM ${this.table}
         WHERE queue_name = $1 AND active_deduplication_id = $2 AND workflow_id = $3 AND dedup_expires_at <= now()`,
        [queueName, deduplicationId, row.workflow_id],
      );
      return undefined;
    }
    return { workflowId: row.workflow_id, status: row.status, started: row.attempts > 0, sameArgs: row.same_args };
  }

  /**
   * Replaces the arguments (and delay, if given) of the holder of a key if it never started; its ID, or undefined.
   * With `requireSameArgs`, only a holder whose stored arguments equal the new ones (as JSON) is touched. With
   * `maxDelayMs`, the start is capped: never later than the earliest `now() + maxDelayMs` of the call that took the
   * key and of every replace that gave one (`start_deadline`).
   */
  async replaceQueued(workflow: NewWorkflow, requireSameArgs = false): Promise<string | undefined> {
    const capped = workflow.maxDelayMs !== null;
    const start = capped
      ? `not_before = least(now() + $5::float8 * interval '1 millisecond', start_deadline,
                            now() + $7::float8 * interval '1 millisecond'),
         start_deadline = least(start_deadline, now() + $7::float8 * interval '1 millisecond')`
      : this.database.citus
        ? citusReplacedStartSql(workflow)
        : `not_before = CASE WHEN $7::timestamptz IS NULL AND $5::float8 IS NULL THEN not_before
                           ELSE coalesce($7::timestamptz, now() + $5::float8 * interval '1 millisecond') END`;
    const rows = await this.query<{ workflow_id: string }>(
      `UPDATE ${this.table}
       SET inputs = $3::json, workflow_name = $4, workflow_version = $8, updated_at = now(), ${start}
       WHERE queue_name = $1 AND active_deduplication_id = $2 AND status = ${STATUS_SQL.ENQUEUED} AND attempts = 0
         AND (NOT $6::bool OR inputs::jsonb = $3::jsonb)
       RETURNING workflow_id`,
      [
        workflow.queueName,
        workflow.deduplicationId,
        workflow.inputsJson,
        workflow.workflowName,
        workflow.delayMs,
        requireSameArgs,
        capped ? workflow.maxDelayMs : workflow.runAt,
        workflow.version,
      ],
    );
    return rows[0]?.workflow_id;
  }

  /**
   * Keeps exactly one follow-up for a key whose holder has started (running, or waiting to retry or to be run again
   * after a recovery): updates the waiting one with the latest arguments, or inserts it (ENQUEUED, not due, holding
   * the key's "next" slot) while the holder is still running. The statement that frees the key hands it to the
   * follow-up (see `endWorkflowsSql`). Undefined when the holder is no longer running. NOTE: the holder row is locked
   * FOR SHARE while the follow-up is inserted, so the holder cannot end in between; a statement ending it that began
   * before the follow-up committed does not see the follow-up, which the heartbeat sweep then hands the key
   * (`handOverStrandedSql`).
   */
  async upsertFollowUp(workflow: NewWorkflow): Promise<{ workflowId: string; created: boolean } | undefined> {
    for (let round = 0; round < 3; round++) {
      const updated = await this.query<{ workflow_id: string }>(
        `UPDATE ${this.table} SET inputs = $3::json, workflow_name = $4, workflow_version = $5, updated_at = now()
         WHERE queue_name = $1 AND next_deduplication_id = $2 AND status = ${STATUS_SQL.ENQUEUED}
         RETURNING workflow_id`,
        [workflow.queueName, workflow.deduplicationId, workflow.inputsJson, workflow.workflowName, workflow.version],
      );
      if (updated[0]) return { workflowId: updated[0].workflow_id, created: false };
      const { sql, params } = this.statements.followUp;
      const [inserted] = this.database.citus
        ? [await this.insertFollowUpOnCitus(workflow)]
        : await this.guarded(() =>
            this.query<{ workflow_id: string | null; holder_running: boolean }>(sql, params.values(workflow)),
          );
      if (!inserted.holder_running) return undefined;
      if (inserted.workflow_id) return { workflowId: inserted.workflow_id, created: true };
    }
    return undefined;
  }

  /**
   * On Citus, the follow-up's insert as two statements in one transaction (the caller's, under a savepoint, or one of
   * its own): the key's started holder locked `FOR SHARE`, so that it cannot end before the follow-up commits, then,
   * if there is one, the follow-up inserted by `VALUES` (see `InsertStatements.followUpHolder`).
   */
  private async insertFollowUpOnCitus(
    workflow: NewWorkflow,
  ): Promise<{ workflow_id: string | null; holder_running: boolean }> {
    const { followUpHolder, followUpValues } = this.statements;
    const run = async (query: Query) => {
      const holder = await query(followUpHolder.sql, followUpHolder.params.values(workflow));
      if (holder.length === 0) return { workflow_id: null, holder_running: false };
      const [row] = await query<{ workflow_id: string }>(followUpValues.sql, followUpValues.params.values(workflow));
      return { workflow_id: row?.workflow_id ?? null, holder_running: true };
    };
    return this.savepoints
      ? this.guarded(() => run(this.query))
      : this.database.transaction((query) => run((sql, params) => query(sql, params, { prepared: true })));
  }

  /**
   * `onDuplicate: 'send'` in one statement: locks the key's holder (`FOR UPDATE`); if it is unfinished (and, with
   * `requireSameArgs`, its arguments equal), stores `workflow`'s arguments as a message on `topic` for it, counts the
   * message and wakes it if it waits in `recv` on that topic (its queue's workers are woken). NOTE: a holder that
   * ends in a statement that began before this one committed does not see the message; it is delivered then by
   * `StrandedDuplicates`, as every message left unreceived by a finished holder is.
   */
  async sendToHolder(workflow: NewWorkflow, topic: string, requireSameArgs: boolean): Promise<SendResult> {
    const rows = await this.query<{
      holder_id: string;
      unfinished: boolean;
      same_args: boolean;
      delivered: number;
      woken: number;
    }>(
      `WITH expired AS (${releaseExpiredKeySql(this.table)}),
       holder AS (
         SELECT workflow_id, created_at, status, waiting_topic,
                status IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL} AS unfinished,
                inputs::jsonb = $4::text::jsonb AS same_args
         FROM ${this.table}
         WHERE queue_name = $1 AND active_deduplication_id = $2 AND ${windowOpenSql()}
           AND workflow_id NOT IN (SELECT workflow_id FROM expired)
         FOR UPDATE
       ),
       delivering AS (
         SELECT workflow_id, created_at, status = ${STATUS_SQL.WAITING} AND waiting_topic = $3 AS wakes FROM holder
         WHERE unfinished AND (same_args OR NOT $5::bool)
       ),
       sent AS (
         INSERT INTO ${this.database.schemaSql}.workflow_messages
           (queue_name, workflow_id, workflow_created_at, topic, message)
         SELECT $1, workflow_id, created_at, $3, $4::text::json FROM delivering
         RETURNING workflow_id
       ),
       ${countAndWakeSql(
         this.table,
         '$1',
         'SELECT workflow_id, 1 AS messages, wakes FROM delivering WHERE EXISTS (SELECT 1 FROM sent)',
         '$6',
         this.database.citus,
       )}
       SELECT h.workflow_id AS holder_id, h.unfinished, h.same_args,
              (SELECT count(*)::int FROM counted) AS delivered, (SELECT count(*) FROM wake_ups) AS woken
       FROM holder AS h`,
      [
        workflow.queueName,
        workflow.deduplicationId,
        topic,
        workflow.inputsJson,
        requireSameArgs,
        this.database.wakeUpChannel,
      ],
    );
    const row = rows[0];
    if (!row) return { outcome: 'free' };
    await sendWakeUpsLeftToCaller(this.database, row.woken > 0 ? [workflow.queueName] : [], this.query);
    if (!row.unfinished) return { outcome: 'window-held', holderId: row.holder_id };
    if (row.delivered === 0) return { outcome: 'mismatch', holderId: row.holder_id };
    return { outcome: 'sent', holderId: row.holder_id };
  }

  /**
   * `onDuplicate: 'supersede'`: in one transaction (under a savepoint in a caller's), ends the key's holder and its
   * waiting follow-up CANCELLED and inserts `workflow` holding the key (see `supersedeStatement`; on Citus,
   * `supersedeOnItsNode`), then tells the processes running what it ended (NOTIFY on the cancel channel, sent on
   * commit) and wakes the queue's workers.
   */
  async supersede(workflow: NewWorkflow, requireSameArgs: boolean): Promise<SupersedeResult> {
    const run = async (query: Query): Promise<SupersedeResult> => {
      const result = this.database.citus
        ? await this.supersedeOnItsNode(query, workflow, requireSameArgs)
        : await this.supersedeInOneStatement(query, workflow, requireSameArgs);
      if (result.outcome !== 'inserted') return result;
      await query(
        `SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload
         UNION ALL SELECT pg_notify($3, $4)`,
        [
          this.database.cancelChannel,
          result.ended.map((ended) => interruptPayload('cancelled', ended.attempt, ended.workflowId)),
          this.database.wakeUpChannel,
          workflow.queueName,
        ],
      );
      return result;
    };
    try {
      return this.savepoints ? await this.guarded(() => run(this.query)) : await this.database.transaction(run);
    } catch (error) {
      if (error instanceof SupersedeLost) return { outcome: 'retry' };
      throw error;
    }
  }

  private async supersedeInOneStatement(
    query: Query,
    workflow: NewWorkflow,
    requireSameArgs: boolean,
  ): Promise<SupersedeResult> {
    const { sql, params } = this.statements.supersede;
    const [row] = await query<{
      inserted_id: string | null;
      window_held: boolean;
      mismatch: boolean;
      id_taken: boolean;
      holder_id: string | null;
      ended: SupersededWorkflow[];
    }>(sql, params.values({ workflow, requireSameArgs, channel: this.database.wakeUpChannel }));
    if (row.id_taken) return { outcome: 'workflow-id-taken' };
    if (row.window_held) return { outcome: 'window-held', holderId: row.holder_id as string };
    if (row.mismatch) return { outcome: 'mismatch', holderId: row.holder_id as string };
    if (row.inserted_id === null) {
      if (row.ended.length > 0) throw new SupersedeLost();
      return { outcome: 'retry' };
    }
    return { outcome: 'inserted', ended: row.ended };
  }

  /**
   * On Citus, `supersedeStatement`'s steps as router statements in the caller's transaction: the key's holders
   * locked; a workflow ID given by the caller looked up (in every queue and the history) or a generated one in the
   * queue; an expired window's key record deleted; the unfinished holders ended (`runEndStatements`); the new
   * workflow inserted.
   */
  private async supersedeOnItsNode(
    query: Query,
    workflow: NewWorkflow,
    requireSameArgs: boolean,
  ): Promise<SupersedeResult> {
    const holders = await query<SupersededHolderRow>(
      this.statements.supersedeHolders.sql,
      this.statements.supersedeHolders.params.values(workflow),
    );
    const queue = workflow.queueName;
    const idsOf = (rows: SupersededHolderRow[]) => rows.map((row) => row.workflow_id);
    const expired = holders.filter((row) => row.held_key && !row.unfinished && !row.window_open);
    if (expired.length > 0) {
      await query(`DELETE FROM ${this.table} WHERE queue_name = $1 AND workflow_id = ANY($2::text[])`, [
        queue,
        idsOf(expired),
      ]);
    }
    const idRows = workflow.workflowIdGiven
      ? await query(`SELECT 1 FROM ${this.tables.workflows} WHERE workflow_id = $1 LIMIT 1`, [workflow.workflowId])
      : await query(`SELECT 1 FROM ${this.table} WHERE queue_name = $1 AND workflow_id = $2`, [
          queue,
          workflow.workflowId,
        ]);
    const holder = holders.find((row) => row.held_key && (row.unfinished || row.window_open));
    if (idRows.length > 0) return { outcome: 'workflow-id-taken' };
    if (holders.some((row) => row.held_key && !row.unfinished && row.window_open)) {
      return { outcome: 'window-held', holderId: holder?.workflow_id as string };
    }
    if (requireSameArgs && holder?.same_args === false) return { outcome: 'mismatch', holderId: holder.workflow_id };
    const unfinished = idsOf(holders.filter((row) => row.unfinished));
    const ended =
      unfinished.length === 0
        ? []
        : await runEndStatements(query, supersedeEndSpec(this.tables), [
            queue,
            unfinished,
            workflow.workflowId,
            this.database.wakeUpChannel,
          ]);
    const supersedes = ended.find((row) => row.active_deduplication_id !== null)?.workflow_id ?? null;
    const { sql, params } = this.statements.insertSuperseding;
    const inserted = await query(sql, params.values({ workflow, supersedes }));
    if (inserted.length === 0) {
      if (ended.length > 0) throw new SupersedeLost();
      return { outcome: 'retry' };
    }
    return {
      outcome: 'inserted',
      ended: ended.map((row) => ({
        workflowId: row.workflow_id,
        workflowName: row.workflow_name,
        attempt: row.attempts,
        heldKey: row.active_deduplication_id !== null,
      })),
    };
  }

  private async existing(workflow: NewWorkflow): Promise<InsertResult> {
    const rows = await this.query<{ queue_name: string; workflow_name: string }>(
      `SELECT queue_name, workflow_name FROM ${this.tables.workflows} WHERE workflow_id = $1
       ORDER BY queue_name = $2 DESC LIMIT 1`,
      [workflow.workflowId, workflow.queueName],
    );
    if (!rows[0]) return { outcome: 'retry' };
    return {
      outcome: 'duplicate-workflow-id',
      existing: { queueName: rows[0].queue_name, workflowName: rows[0].workflow_name },
    };
  }

  private async guarded<T>(statement: () => Promise<T>): Promise<T> {
    if (!this.savepoints) return statement();
    await this.query('SAVEPOINT dedup_queue_enqueue');
    try {
      const result = await statement();
      await this.query('RELEASE SAVEPOINT dedup_queue_enqueue');
      return result;
    } catch (error) {
      await this.query('ROLLBACK TO SAVEPOINT dedup_queue_enqueue');
      throw error;
    }
  }

  private get cacheKey(): string {
    return `${this.database.citus ? 'citus:' : ''}${this.table}`;
  }

  private get statements(): InsertStatements {
    let statements = statementsBySchema.get(this.cacheKey);
    if (!statements)
      statementsBySchema.set(this.cacheKey, (statements = insertStatements(this.tables, this.database.citus)));
    return statements;
  }
}

/**
 * The order in which a batch's rows go in on Citus: by deduplication ID (none last), then as given (a stable sort),
 * so that concurrent batches over the same keys take their index locks in the same order instead of deadlocking.
 */
function byDeduplicationId(a: NewWorkflow, b: NewWorkflow): number {
  if (a.deduplicationId === b.deduplicationId) return 0;
  if (a.deduplicationId === null) return 1;
  if (b.deduplicationId === null) return -1;
  return a.deduplicationId < b.deduplicationId ? -1 : 1;
}

/**
 * On Citus, the uncapped start of `replaceQueued` ($7 run at, $5 delay) without `now()` in a CASE (refused there):
 * the form is chosen here; each form still names both parameters, so that their types are known.
 */
function citusReplacedStartSql(workflow: NewWorkflow): string {
  if (workflow.runAt) return 'not_before = coalesce($7::timestamptz, CASE WHEN $5::float8 IS NULL THEN not_before END)';
  if (workflow.delayMs !== null) {
    return `not_before = now() + $5::float8 * interval '1 millisecond',
            start_deadline = coalesce(start_deadline, $7::timestamptz)`;
  }
  return 'not_before = CASE WHEN $7::timestamptz IS NULL AND $5::float8 IS NULL THEN not_before END';
}
