import {
  MAX_ROWS_PER_ROUTER_INSERT,
  holdersOnOneQueueSql,
  keyHoldersOnOneQueueSql,
} from './workflow-insert.statements';
import { isUniqueViolationOn } from '../../connection/sql-errors';
import type { NewWorkflow } from '../new-workflow';
import {
  type EarlyRefusals,
  type HolderReportRow,
  type InsertResult,
  type InsertedRow,
  type LoneInsertedRow,
  holderReportOf,
  insertResultOf,
  loneResultOf,
  refusedBeforeTheBatch,
} from './insert-results';
import { ACTIVE_STATUSES_SQL } from '../../tables/workflow-status.sql';
import { ACTIVE_WORKFLOW_STATUSES } from '../../../interfaces/workflow-status.interface';
import { ACTIVE_DEDUPLICATION_INDEX } from '../../tables/workflow-tables';
import { sendWakeUpsLeftToCaller } from '../../connection/wake-ups.sql';
import { EnqueueConnection } from './enqueue-connection';
import type { Query } from '../../connection/queue-database';
import { type ReadyRow, insertReadyRowsOnCitus } from '../../tables/ready-rows.sql';

/**
 * The SQL of enqueueing: one workflow (a unique violation on the partial index means its deduplication ID is held),
 * or many in one statement (ON CONFLICT DO NOTHING; the same index decides each row). Bound to the module's pool, or
 * with `inTransaction` to a caller's transaction, where each insert runs under a savepoint so that a duplicate does
 * not abort the caller's transaction (see `EnqueueConnection`). Who holds a key: `KeyHolderStore`; what the duplicate
 * policies do to the holder: `DuplicatePolicyStore`.
 */
export class WorkflowInserter extends EnqueueConnection {
  /** Inserts one workflow and tells what happened (inserted, deduplicated, or its workflow ID taken). */
  async insert(workflow: NewWorkflow): Promise<InsertResult> {
    try {
      const { sql, params } = this.statements.one;
      const result = await this.guarded(() =>
        this.atomically(this.query, async (query) => {
          const rows = await query<ReadyRow>(sql, params.values({ workflow, channel: this.database.wakeUpChannel }));
          if (rows.length !== 1) return undefined;
          if (this.database.citus) await insertReadyRowsOnCitus(query, this.tables.ready, rows);
          await sendWakeUpsLeftToCaller(this.database, [workflow.queueName], query);
          const [checked] = await this.takeBackTaken(query, [workflow], [{ outcome: 'inserted' }]);
          return checked;
        }),
      );
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
      await this.atomically(query, async (inQueue) => {
        for (let from = 0; from < inKeyOrder.length; from += MAX_ROWS_PER_ROUTER_INSERT) {
          const rows = inKeyOrder.slice(from, from + MAX_ROWS_PER_ROUTER_INSERT);
          const { sql, params } = this.statements.rowsOfOneQueue(rows.length);
          const readyRows = await inQueue<ReadyRow>(sql, params.values(rows));
          await insertReadyRowsOnCitus(inQueue, this.tables.ready, readyRows);
          for (const row of readyRows) inserted.add(row.workflow_id);
        }
      });
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
