import type { WorkflowStatus } from '../../../interfaces/workflow-status.interface';
import type { Query, QueueDatabase } from '../../connection/queue-database';
import {
  ENDED_WAKE_UPS_SQL,
  EndSpec,
  EndingRow,
  endWorkflowsSql,
  handOverStrandedSql,
  runEndStatements,
} from '../finish/workflow-finish.sql';
import { WorkflowReadStore } from '../reads/workflow-reads.store';
import { WorkflowRef, WorkflowRefRow, toWorkflowRef } from '../workflow-ref';
import { ACTIVE_STATUSES_SQL, RESUMABLE_STATUSES, STATUS_SQL, cancellableSql } from '../../tables/workflow-status.sql';
import {
  ACTIVE_DEDUPLICATION_INDEX,
  WORKFLOW_COLUMN_LIST,
  WorkflowTables,
  workflowColumnsSql,
  workflowTables,
} from '../../tables/workflow-tables';
import { isUniqueViolationOn } from '../../connection/sql-errors';
import { usedParameters } from '../../connection/sql-parameters';
import { changedStartSql } from '../../connection/time.sql';
import { NOTIFY_SQL, sendWakeUpsLeftToCaller, wakeUpCteSql } from '../../connection/wake-ups.sql';
import { interruptPayload, interruptPayloadPrefix, interruptPayloadSql } from '../interrupt-payload';
import {
  READY_ROW_COLUMNS,
  type ReadyRow,
  insertReadyRowsOnCitus,
  insertReadyRowsSql,
} from '../../tables/ready-rows.sql';

/**
 * Built from IMMUTABLE parts only (text casts, concatenation, coalesce), as Citus wants in a CASE of a modification.
 * A workflow without a timeout of its own had its parent's deadline.
 */
const TIMEOUT_ERROR_JSON = `('{"name":"WorkflowTimeoutError","message":"'
  || coalesce('Workflow timed out after ' || w.timeout_ms::text || ' ms', 'Workflow timed out at its parent''s deadline')
  || '"}')::json`;

/** What `resume` sets: ENQUEUED, holding its deduplication ID again, its recovery count and deadline reset. */
export const RESUMED_COLUMNS = {
  status: STATUS_SQL.ENQUEUED,
  active_deduplication_id: 'deduplication_id',
  executor_id: 'NULL',
  recovery_attempts: '0',
  not_before: 'NULL',
  deadline_at: 'NULL',
  error: 'NULL',
  completed_at: 'NULL',
  updated_at: 'now()',
} as const;

/**
 * The SQL that acts on single workflows after they were enqueued: cancel and timeouts, the hand-over of stranded
 * follow-ups, resume and reschedule. A cancel ends workflows through `endWorkflowsSql` in one statement (on Citus,
 * router statements in one transaction: `runEndStatements`). Locks: none beyond the rows a statement updates; a cancel
 * waits for a step transaction that holds its row `FOR SHARE` (see `StepStore.lockIfOwned`), and the timeout sweep
 * skips such rows (`FOR UPDATE SKIP LOCKED`) until its next round.
 */
export class WorkflowControlStore {
  private readonly tables: WorkflowTables;
  private readonly table: string;
  private readonly reads: WorkflowReadStore;

  constructor(private readonly database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
    this.reads = new WorkflowReadStore(database);
    this.table = this.tables.active;
  }

  /**
   * Ends an ENQUEUED or PENDING workflow as CANCELLED, frees its deduplication ID and tells the process running it
   * (NOTIFY on the cancel channel). Returns the status the workflow has afterwards and its claim count (the run a
   * cancel ended; with `cancelled` when this call cancelled it), or undefined when it does not exist. A timeout
   * records a `WorkflowTimeoutError` as the error.
   */
  async cancel(
    workflowId: string,
    reason: 'cancelled' | 'timed-out' = 'cancelled',
  ): Promise<{ status: WorkflowStatus; attempts: number; cancelled?: WorkflowRef } | undefined> {
    const citus = this.database.citus;
    // NOTE: on Citus the queue is looked up first (a probe of every node), so that the cancel runs on its node.
    const queue = citus ? await this.reads.findQueue(workflowId) : undefined;
    if (citus && queue === undefined) return undefined;
    const spec: EndSpec = {
      tables: this.tables,
      where: `w.workflow_id = $1 AND ${cancellableSql('w.')}${citus ? ' AND w.queue_name = $6' : ''}`,
      status: STATUS_SQL.CANCELLED,
      error: `CASE WHEN $2 = 'timed-out' THEN ${TIMEOUT_ERROR_JSON} END`,
      channelParam: '$5',
      citus,
      queueParam: citus ? '$6' : undefined,
    };
    const params = [
      workflowId,
      reason,
      this.database.cancelChannel,
      interruptPayloadPrefix(reason),
      this.database.wakeUpChannel,
      ...(citus ? [queue] : []),
    ];
    const cancelled = citus
      ? await this.database.transaction(async (query) =>
          this.notifyCancelled(query, reason, await runEndStatements(query, spec, params)),
        )
      : await this.database.query<WorkflowRefRow & { attempts: number }>(
          `WITH ${endWorkflowsSql(spec)}
       SELECT attempts, workflow_id, queue_name, workflow_name,
              pg_notify($3, ${interruptPayloadSql('$4')}), ${ENDED_WAKE_UPS_SQL} AS handed_over
       FROM ended`,
          params,
          { idempotent: true },
        );
    if (cancelled.length === 1) {
      return { status: 'CANCELLED', attempts: cancelled[0].attempts, cancelled: toWorkflowRef(cancelled[0]) };
    }
    const row = await this.reads.findRow(workflowId);
    return row && { status: row.status, attempts: row.attempts };
  }

  /**
   * Cancels every workflow of a queue past its start-to-close deadline, wherever it runs (or whoever ran it died). Rows locked
   * by a step's transaction are skipped until the next sweep rather than waited for.
   */
  async cancelTimedOut(queueName: string): Promise<WorkflowRef[]> {
    const due = `SELECT workflow_id, queue_name FROM ${this.table}
         WHERE queue_name = $4 AND live_deadline_at <= now() AND status IN ${ACTIVE_STATUSES_SQL}
         FOR UPDATE SKIP LOCKED`;
    const params = [
      this.database.cancelChannel,
      interruptPayloadPrefix('timed-out'),
      this.database.wakeUpChannel,
      queueName,
    ];
    const spec: EndSpec = {
      tables: this.tables,
      using: this.database.citus ? undefined : 'due',
      where: `w.queue_name = $4 AND w.workflow_id = ${this.database.citus ? 'ANY($5::text[])' : 'due.workflow_id'}`,
      status: STATUS_SQL.CANCELLED,
      error: TIMEOUT_ERROR_JSON,
      channelParam: '$3',
      citus: this.database.citus,
      queueParam: '$4',
    };
    if (this.database.citus) {
      return this.database.transaction(async (query) => {
        const locked = await query<{ workflow_id: string }>(...usedParameters(due, params));
        if (locked.length === 0) return [];
        const ids = locked.map((row) => row.workflow_id);
        const ended = await runEndStatements(query, spec, [...params, ids]);
        return (await this.notifyCancelled(query, 'timed-out', ended)).map(toWorkflowRef);
      });
    }
    const rows = await this.database.query<WorkflowRefRow>(
      `WITH due AS (
         ${due}
       ),
       ${endWorkflowsSql(spec)}
       SELECT workflow_id, queue_name, workflow_name, pg_notify($1, ${interruptPayloadSql('$2')}),
              ${ENDED_WAKE_UPS_SQL} AS handed_over
       FROM ended`,
      params,
      { idempotent: true },
    );
    return rows.map(toWorkflowRef);
  }

  /** On Citus, after `runEndStatements`: tells the processes running the ended workflows (from the coordinator). */
  private async notifyCancelled<R extends EndingRow>(
    query: Query,
    reason: 'cancelled' | 'timed-out',
    ended: R[],
  ): Promise<R[]> {
    if (ended.length > 0) {
      await query(NOTIFY_SQL, [
        this.database.cancelChannel,
        ended.map((row) => interruptPayload(reason, row.attempts, row.workflow_id)),
      ]);
    }
    return ended;
  }

  /**
   * Hands their keys to the `queue-next` follow-ups of a queue that no unfinished workflow holds the key of (see
   * `handOverStrandedSql`); how many took one. A key taken meanwhile by a new holder (a unique violation) leaves the
   * follow-up waiting for that holder, which will hand it over.
   */
  async handOverStrandedFollowUps(queueName: string): Promise<number> {
    try {
      const [row] = await this.database.query<{ handed_over: number }>(
        handOverStrandedSql(this.table, this.database.citus),
        [this.database.wakeUpChannel, queueName],
      );
      await sendWakeUpsLeftToCaller(this.database, row.handed_over > 0 ? [queueName] : []);
      return row.handed_over;
    } catch (error) {
      if (isUniqueViolationOn(error, ACTIVE_DEDUPLICATION_INDEX)) return 0;
      throw error;
    }
  }

  /**
   * Puts a CANCELLED or dead-lettered workflow back in its queue with its recovery count reset; it takes its
   * deduplication ID again (a unique violation if another workflow holds it meanwhile) and keeps its completed
   * steps. Returns the status it had before, or undefined when it does not exist.
   */
  async resume(
    workflowId: string,
  ): Promise<{ before: WorkflowStatus; queueName: string; deduplicationId: string | null } | undefined> {
    const row = await this.reads.findRow(workflowId);
    if (!row) return undefined;
    if ((RESUMABLE_STATUSES as readonly string[]).includes(row.status) && this.database.citus) {
      await this.resumeOnItsNode(workflowId, row.queue_name);
    } else if ((RESUMABLE_STATUSES as readonly string[]).includes(row.status)) {
      // NOTE: a dead letter waits in the active table; a cancelled workflow comes back from the history.
      await this.database.query(
        `WITH in_place AS (
           UPDATE ${this.table}
           SET ${Object.entries(RESUMED_COLUMNS)
             .map(([column, value]) => `${column} = ${value}`)
             .join(', ')}
           WHERE workflow_id = $1 AND status = ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED}
           RETURNING ${READY_ROW_COLUMNS}
         ),
         moved AS (
           DELETE FROM ${this.tables.history} WHERE workflow_id = $1 AND status = ${STATUS_SQL.CANCELLED} RETURNING *
         ),
         back AS (
           INSERT INTO ${this.table} (${WORKFLOW_COLUMN_LIST}) SELECT ${workflowColumnsSql('', RESUMED_COLUMNS)} FROM moved
           RETURNING ${READY_ROW_COLUMNS}
         ),
         ready AS (
           ${insertReadyRowsSql(this.tables.ready, '(SELECT * FROM in_place UNION ALL SELECT * FROM back)', true)}
         )
         SELECT pg_notify($2, queue_name)::text FROM (SELECT queue_name FROM in_place UNION ALL SELECT queue_name FROM back) AS q`,
        [workflowId, this.database.wakeUpChannel],
      );
    }
    return { before: row.status, queueName: row.queue_name, deduplicationId: row.deduplication_id };
  }

  /**
   * On Citus, `resume` as statements on the queue's node, in one transaction: a dead letter in place; a cancelled
   * workflow copied back from the history (`INSERT … SELECT`), then deleted from it (a moved row inserted from a
   * data-modifying CTE would travel through the coordinator); the wake-up a statement of its own.
   */
  private async resumeOnItsNode(workflowId: string, queueName: string): Promise<void> {
    const resumed = Object.entries(RESUMED_COLUMNS)
      .map(([column, value]) => `${column} = ${value}`)
      .join(', ');
    await this.database.transaction(async (query) => {
      const inPlace = await query<ReadyRow>(
        `UPDATE ${this.table} SET ${resumed}
         WHERE queue_name = $2 AND workflow_id = $1 AND status = ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED}
         RETURNING ${READY_ROW_COLUMNS}`,
        [workflowId, queueName],
      );
      const back = await query<ReadyRow>(
        `INSERT INTO ${this.table} (${WORKFLOW_COLUMN_LIST})
         SELECT ${workflowColumnsSql('', RESUMED_COLUMNS)} FROM ${this.tables.history}
         WHERE queue_name = $2 AND workflow_id = $1 AND status = ${STATUS_SQL.CANCELLED}
         ON CONFLICT (workflow_id, queue_name) DO NOTHING
         RETURNING ${READY_ROW_COLUMNS}`,
        [workflowId, queueName],
      );
      await insertReadyRowsOnCitus(query, this.tables.ready, [...inPlace, ...back]);
      if (back.length > 0) {
        await query(
          `DELETE FROM ${this.tables.history}
           WHERE queue_name = $2 AND workflow_id = $1 AND status = ${STATUS_SQL.CANCELLED}`,
          [workflowId, queueName],
        );
      }
      if (inPlace.length + back.length > 0) {
        await query('SELECT pg_notify($1, $2)::text', [this.database.wakeUpChannel, queueName]);
      }
    });
  }

  /**
   * Changes when an ENQUEUED workflow may start and its priority. Returns its status afterwards (unchanged unless
   * ENQUEUED), or undefined when it does not exist.
   */
  async reschedule(
    workflowId: string,
    change: { runAt: Date | null; delayMs: number | null; priority: number | null },
  ): Promise<WorkflowStatus | undefined> {
    const citus = this.database.citus;
    const queue = citus ? await this.reads.findQueue(workflowId) : undefined;
    if (citus && queue === undefined) return undefined;
    const base: unknown[] = [workflowId, change.priority, this.database.wakeUpChannel, ...(citus ? [queue] : [])];
    const start = changedStartSql(citus, change, base.length + 1);
    const rows = await this.database.transaction(async (query) => {
      const [before] = await query<{ priority: number }>(
        `SELECT priority FROM ${this.table}
         WHERE workflow_id = $1 AND status = ${STATUS_SQL.ENQUEUED} ${citus ? 'AND queue_name = $2' : ''}
         FOR UPDATE`,
        [workflowId, ...(citus ? [queue] : [])],
      );
      if (!before) return [];
      const changed = await query<ReadyRow>(
        `WITH changed AS (
           UPDATE ${this.table}
           SET ${start.sql} priority = coalesce($2::int, priority), updated_at = now()
           WHERE workflow_id = $1 AND status = ${STATUS_SQL.ENQUEUED} ${citus ? 'AND queue_name = $4' : ''}
           RETURNING ${READY_ROW_COLUMNS}
         ),
         ${wakeUpCteSql(citus, 'woken', '$3', 'changed')}
         SELECT ${READY_ROW_COLUMNS}, (SELECT count(*) FROM woken) AS woken FROM changed`,
        [...base, ...start.params],
      );
      for (const row of changed.filter((row) => row.priority !== before.priority)) {
        await query(
          `UPDATE ${this.tables.ready} SET priority = $5
           WHERE queue_name = $1 AND priority = $2 AND seq = $3 AND workflow_id = $4`,
          [row.queue_name, before.priority, row.seq, row.workflow_id, row.priority],
        );
      }
      return changed;
    });
    if (rows.length === 1) {
      await sendWakeUpsLeftToCaller(this.database, [rows[0].queue_name]);
      return 'ENQUEUED';
    }
    return (await this.reads.findRow(workflowId))?.status;
  }
}
