import type { Query, QueueDatabase } from '../../connection/queue-database';
import { READY_ROW_COLUMNS, insertReadyRowsSql } from '../../tables/ready-rows.sql';
import { isUniqueViolationOn } from '../../connection/sql-errors';
import { ENDED_WAKE_UPS_SQL, EndSpec, endWorkflowsSql, runEndStatements } from '../finish/workflow-finish.sql';
import { NOTIFY_SQL } from '../../connection/wake-ups.sql';
import { usedParameters } from '../../connection/sql-parameters';
import { REPORTED_STATUS_SQL } from '../workflow-row';
import { interruptPayload } from '../interrupt-payload';
import { RESUMED_COLUMNS, WorkflowControlStore } from './workflow-control.store';
import {
  ACTIVE_STATUSES_SQL,
  ACTIVE_TABLE_WORKFLOW_STATUSES_SQL,
  STATUS_SQL,
  cancellableSql,
} from '../../tables/workflow-status.sql';
import {
  ACTIVE_DEDUPLICATION_INDEX,
  WORKFLOW_COLUMN_LIST,
  WorkflowTables,
  workflowColumnsSql,
  workflowTables,
} from '../../tables/workflow-tables';

/** A filter as the statements take it: arrays, or null for a field not given. */
export interface BulkFilter {
  workflowIds: string[] | null;
  deduplicationIds: string[] | null;
  /** Reported statuses (`DELAYED` apart from `ENQUEUED`). */
  statuses: string[] | null;
}

/** One batch's answer: what happened to each matched workflow, and the cursor for the next batch. */
export interface BulkBatch {
  results: Array<{
    workflowId: string;
    outcome: 'cancelled' | 'not-cancellable' | 'resumed' | 'key-held';
    /** Of a cancelled workflow: its workflow's name, for the `cancelled` lifecycle event. */
    workflowName?: string;
  }>;
  /** The highest `seq` matched; undefined when the batch matched nothing. */
  lastSeq?: string;
}

/** $1 queue, $2 seq cursor, $3 workflow IDs, $4 deduplication IDs, $5 reported statuses, $6 batch size. */
export function matchesSql(row = ''): string {
  return `${row}queue_name = $1 AND ${row}seq > $2::bigint
    AND ($3::text[] IS NULL OR ${row}workflow_id = ANY($3::text[]))
    AND ($4::text[] IS NULL OR ${row}deduplication_id = ANY($4::text[]))
    AND ($5::text[] IS NULL OR ${REPORTED_STATUS_SQL} = ANY($5::text[]))`;
}

/** The parameters `matchesSql` reads, $1 to $5. */
export function filterParams(queueName: string, filter: BulkFilter, afterSeq: string): unknown[] {
  return [queueName, afterSeq, filter.workflowIds, filter.deduplicationIds, filter.statuses];
}

/** A matched row of a cancel batch, and whether it was cancelled (with its claim count and workflow name). */
interface CancelledRow {
  workflow_id: string;
  seq: string;
  cancelled: boolean;
  attempts: number | null;
  workflow_name: string | null;
}

/**
 * The SQL of `cancelMany` and `resumeMany`: one statement per batch of one queue (every statement names its queue),
 * walking the queue's matching workflows in `seq` order, and, in the same transaction, a statement of its own that
 * sends the notifications (cancel signals for what ran, wake-ups). Cancels end workflows through `endWorkflowsSql`,
 * as `cancel` does (on Citus, the batch is locked, then ended by the router statements of `runEndStatements`); resumes take each workflow's key back unless another workflow holds it (`key-held`).
 */
export class BulkControlStore {
  private readonly tables: WorkflowTables;
  private readonly store: WorkflowControlStore;

  constructor(private readonly database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
    this.store = new WorkflowControlStore(database);
  }

  /**
   * Cancels one batch of a queue's unfinished workflows that match; dead letters are matched, and cancelled only with
   * `deadLetters` (as a tree's descendants are).
   */
  async cancelBatch(
    queueName: string,
    filter: BulkFilter,
    afterSeq: string,
    limit: number,
    deadLetters = false,
  ): Promise<BulkBatch> {
    const params = [
      queueName,
      afterSeq,
      filter.workflowIds,
      filter.deduplicationIds,
      filter.statuses,
      limit,
      this.database.wakeUpChannel,
    ];
    return this.database.transaction(async (query) => {
      const rows = this.database.citus
        ? await this.cancelMatchedOnItsNode(query, params, deadLetters)
        : await query<CancelledRow>(
            `WITH matched AS (
           ${this.matchedSql()}
         ),
         ${endWorkflowsSql(this.cancelSpec(false, deadLetters))}
         SELECT m.workflow_id, m.seq::text AS seq, e.workflow_id IS NOT NULL AS cancelled, e.attempts, e.workflow_name,
                ${ENDED_WAKE_UPS_SQL} AS handed_over
         FROM matched AS m LEFT JOIN ended AS e ON e.workflow_id = m.workflow_id
         ORDER BY m.seq`,
            params,
          );
      const cancelled = rows.filter((row) => row.cancelled);
      if (cancelled.length > 0) {
        await this.notify(query, this.database.cancelChannel, [
          ...cancelled.map((row) => interruptPayload('cancelled', row.attempts as number, row.workflow_id)),
        ]);
      }
      return {
        results: rows.map((row) =>
          row.cancelled
            ? { workflowId: row.workflow_id, outcome: 'cancelled' as const, workflowName: row.workflow_name as string }
            : { workflowId: row.workflow_id, outcome: 'not-cancellable' as const },
        ),
        lastSeq: rows[rows.length - 1]?.seq,
      };
    });
  }

  /** The batch's matching rows (unfinished or dead letters), locked, in `seq` order. */
  private matchedSql(): string {
    return `SELECT workflow_id, seq FROM ${this.tables.active}
           WHERE ${matchesSql()} AND (status IN ${ACTIVE_STATUSES_SQL}
                                      OR status = ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED})
           ORDER BY seq LIMIT $6
           FOR UPDATE`;
  }

  /**
   * The matched rows that are unfinished (and dead letters, with `deadLetters`) end CANCELLED: those of `matched AS m`
   * (on Citus, the IDs $8).
   */
  private cancelSpec(citus: boolean, deadLetters: boolean): EndSpec {
    const cancellable = deadLetters ? `w.status IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL}` : cancellableSql('w.');
    return {
      tables: this.tables,
      using: citus ? undefined : 'matched AS m',
      where: `w.queue_name = $1 AND w.workflow_id = ${citus ? 'ANY($8::text[])' : 'm.workflow_id'} AND ${cancellable}`,
      status: STATUS_SQL.CANCELLED,
      channelParam: '$7',
      citus,
      queueParam: '$1',
    };
  }

  /** On Citus, the cancel of a batch as router statements: the matched rows locked, then `runEndStatements`. */
  private async cancelMatchedOnItsNode(query: Query, params: unknown[], deadLetters: boolean): Promise<CancelledRow[]> {
    const matched = await query<{ workflow_id: string; seq: string }>(...usedParameters(this.matchedSql(), params));
    if (matched.length === 0) return [];
    const ids = matched.map((row) => row.workflow_id);
    const ended = new Map(
      (await runEndStatements(query, this.cancelSpec(true, deadLetters), [...params, ids])).map((row) => [
        row.workflow_id,
        row,
      ]),
    );
    return matched.map((row) => ({
      workflow_id: row.workflow_id,
      seq: String(row.seq),
      cancelled: ended.has(row.workflow_id),
      attempts: ended.get(row.workflow_id)?.attempts ?? null,
      workflow_name: ended.get(row.workflow_id)?.workflow_name ?? null,
    }));
  }

  /**
   * Resumes one batch of a queue's CANCELLED (from the history) and dead-lettered workflows that match. A workflow
   * whose key another holds stays as it was (`key-held`). NOTE: a cancelled workflow is inserted back before its
   * history row is deleted (`ON CONFLICT DO NOTHING` decides the key), so a refused one keeps its history; if a dead
   * letter's key is taken in between (a unique violation), the batch is done one workflow at a time instead.
   */
  async resumeBatch(queueName: string, filter: BulkFilter, afterSeq: string, limit: number): Promise<BulkBatch> {
    const params = [...filterParams(queueName, filter, afterSeq), limit];
    let rows: Array<{ workflow_id: string; seq: string; resumed: boolean }>;
    try {
      rows = await this.database.transaction(async (query) => {
        const batch = await query<{ workflow_id: string; seq: string; resumed: boolean }>(
          `WITH candidates AS (
             (SELECT workflow_id, seq, true AS from_history FROM ${this.tables.history}
              WHERE ${matchesSql()} AND status = ${STATUS_SQL.CANCELLED}
              UNION ALL
              SELECT workflow_id, seq, false FROM ${this.tables.active}
              WHERE ${matchesSql()} AND status = ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED})
             ORDER BY seq LIMIT $6
           ),
           in_place AS (
             UPDATE ${this.tables.active} AS w
             SET ${Object.entries(RESUMED_COLUMNS)
               .map(([column, value]) => `${column} = ${value}`)
               .join(', ')}
             WHERE w.queue_name = $1
               AND w.workflow_id = ANY (ARRAY(SELECT workflow_id FROM candidates WHERE NOT from_history))
               AND w.status = ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED}
               AND NOT EXISTS (SELECT 1 FROM ${this.tables.active} AS k
                               WHERE k.queue_name = $1 AND k.active_deduplication_id = w.deduplication_id
                                 AND k.workflow_id <> w.workflow_id)
             RETURNING ${READY_ROW_COLUMNS.replace(/(\w+)/g, 'w.$1')}
           ),
           back AS (
             INSERT INTO ${this.tables.active} (${WORKFLOW_COLUMN_LIST})
             SELECT ${workflowColumnsSql('h.', RESUMED_COLUMNS)}
             FROM ${this.tables.history} AS h
             WHERE h.queue_name = $1 AND h.status = ${STATUS_SQL.CANCELLED}
               AND h.workflow_id = ANY (ARRAY(SELECT workflow_id FROM candidates WHERE from_history))
             ON CONFLICT DO NOTHING
             RETURNING ${READY_ROW_COLUMNS}
           ),
           ready AS (
             ${insertReadyRowsSql(this.tables.ready, '(SELECT * FROM in_place UNION ALL SELECT * FROM back)', true)}
           ),
           moved AS (
             DELETE FROM ${this.tables.history} AS h
             WHERE h.queue_name = $1 AND h.workflow_id = ANY (ARRAY(SELECT workflow_id FROM back))
               AND h.status = ${STATUS_SQL.CANCELLED}
           ),
           resumed AS (SELECT workflow_id FROM in_place UNION ALL SELECT workflow_id FROM back)
           SELECT c.workflow_id, c.seq::text AS seq, r.workflow_id IS NOT NULL AS resumed
           FROM candidates AS c LEFT JOIN resumed AS r ON r.workflow_id = c.workflow_id
           ORDER BY c.seq`,
          params,
        );
        if (batch.some((row) => row.resumed)) await this.notify(query, this.database.wakeUpChannel, [queueName]);
        return batch;
      });
    } catch (error) {
      if (!isUniqueViolationOn(error, ACTIVE_DEDUPLICATION_INDEX)) throw error;
      rows = await this.resumeOneByOne(queueName, filter, afterSeq, limit);
    }
    return {
      results: rows.map((row) => ({
        workflowId: row.workflow_id,
        outcome: row.resumed ? ('resumed' as const) : ('key-held' as const),
      })),
      lastSeq: rows[rows.length - 1]?.seq,
    };
  }

  private async resumeOneByOne(
    queueName: string,
    filter: BulkFilter,
    afterSeq: string,
    limit: number,
  ): Promise<Array<{ workflow_id: string; seq: string; resumed: boolean }>> {
    const candidates = await this.database.query<{ workflow_id: string; seq: string }>(
      `SELECT workflow_id, seq::text AS seq FROM (
         SELECT workflow_id, seq FROM ${this.tables.history}
         WHERE ${matchesSql()} AND status = ${STATUS_SQL.CANCELLED}
         UNION ALL
         SELECT workflow_id, seq FROM ${this.tables.active}
         WHERE ${matchesSql()} AND status = ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED}
       ) AS c ORDER BY seq LIMIT $6`,
      [...filterParams(queueName, filter, afterSeq), limit],
    );
    const rows = [];
    for (const candidate of candidates) {
      let resumed = false;
      try {
        await this.store.resume(candidate.workflow_id);
        resumed = true;
      } catch (error) {
        if (!isUniqueViolationOn(error, ACTIVE_DEDUPLICATION_INDEX)) throw error;
      }
      rows.push({ ...candidate, resumed });
    }
    return rows;
  }

  private async notify(query: Query, channel: string, payloads: string[]): Promise<void> {
    await query(NOTIFY_SQL, [channel, payloads]);
  }
}
