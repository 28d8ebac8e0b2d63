import type { WorkflowStatus } from '../../../interfaces/workflow-status.interface';
import { HOLDER_REPORT_COLUMNS_SQL } from './workflow-insert.statements';
import { releaseExpiredKeySql, windowOpenSql } from '../finish/workflow-finish.sql';
import { type Holder, type HolderReport, type HolderReportRow, holderReportOf, holderStateOf } from './insert-results';
import type { DeduplicationHolderState } from '../../../errors/queue-deduplicated.error';
import { REPORTED_STATUS_SQL } from '../workflow-row';
import { EnqueueConnection } from './enqueue-connection';
import type { Query } from '../../connection/queue-database';

/**
 * Who holds a deduplication key (`findHolder`, which lets go of a key whose window has passed), and what a refused
 * duplicate tells about its holder. `findHolder` runs where the enqueue runs (see `EnqueueConnection`); the holder
 * reports on the module's own connections.
 */
export class KeyHolderStore extends EnqueueConnection {
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
}
