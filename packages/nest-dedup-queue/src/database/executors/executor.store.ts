import { hostname } from 'node:os';
import type { InterruptReason } from '../../errors/workflow-interrupted.error';
import type { WorkflowStatus } from '../../interfaces/workflow-status.interface';
import type { QueueDatabase } from '../connection/queue-database';
import { END_WAKE_UPS_SQL, handOverCallSql } from '../workflows/finish/workflow-finish.sql';
import { handOverKeysOnCitus } from '../workflows/finish/hand-over.citus';
import { NOTIFY_SQL, sendWakeUpsLeftToCaller, wakeUpCteSql } from '../connection/wake-ups.sql';
import { STATUS_SQL } from '../tables/workflow-status.sql';
import { nowPlusMsSql } from '../connection/time.sql';
import { WorkflowTables, workflowTables } from '../tables/workflow-tables';
import { WorkflowRef, WorkflowRefRow, toWorkflowRef } from '../workflows/workflow-ref';
import type { WorkflowRegistration } from '../versions/workflow-registrations';
import { CitusExecutorLeases } from './executor-leases.citus';
import {
  READY_ROW_COLUMNS,
  type ReadyRow,
  insertReadyRowsOnCitus,
  insertReadyRowsSql,
  moveIntoReady,
} from '../tables/ready-rows.sql';
import type { Query } from '../connection/queue-database';

/** A workflow taken back from a dead executor: ENQUEUED again, or dead-lettered. */
export interface RecoveredWorkflow extends WorkflowRef {
  status: Extract<WorkflowStatus, 'ENQUEUED' | 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'>;
}

/** What an executor runs: the queues it drains, and the workflow names and versions it claims in them. */
export interface ExecutorRuns {
  queues: string[];
  workflows: WorkflowRegistration[];
}

/**
 * On Citus, where an executor takes a lease in each queue it claims from (see `CitusExecutorLeases`): the stored names
 * of those queues (each shard of a queue with shards) and how long a lease lasts unless renewed. Ignored on one
 * server.
 */
export interface ExecutorLease {
  queues: readonly string[];
  ms: number;
}

/** A workflow this process holds (runs, buffers, or may be taking in a claim in flight) and its queue. */
export interface HeldRun {
  workflowId: string;
  queueName: string;
}

/** What `notOwned` reads of each held workflow, from the active table or the history. */
interface RunStateRow {
  queue_name: string;
  workflow_id: string;
  status: WorkflowStatus;
  error_name: string | null;
  attempts: number;
  executor_id: string | null;
}

/** A workflow this executor runs but no longer owns, and why (the run it was, for a cancel). */
export interface NotOwnedWorkflow {
  workflowId: string;
  reason: Extract<InterruptReason, 'cancelled' | 'timed-out' | 'ownership-lost'>;
  attempt?: number;
}

/**
 * A recovered workflow past its recovery budget: it is dead-lettered instead of put back in its queue. A dead letter
 * stays in the active table (it lets go of its key) until `resume` or a cancel.
 */
const DEAD_LETTERED = 'w.recovery_attempts >= w.max_recovery_attempts';

/**
 * The SQL of executors and leases: each worker process keeps a row with a heartbeat; the PENDING workflows of an
 * executor whose heartbeat is older than the lease go back to their queue (or are dead-lettered past their
 * recovery budget), keeping their deduplication IDs.
 */
export class ExecutorStore {
  private readonly tables: WorkflowTables;
  private readonly executors: string;
  private readonly workflows: string;
  private readonly leases: CitusExecutorLeases;

  constructor(private readonly database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
    this.executors = `${database.schemaSql}.executors`;
    this.workflows = this.tables.active;
    this.leases = new CitusExecutorLeases(database);
  }

  /**
   * Registers (or renews) this executor's lease with what it runs: the queues it drains and the workflow names and
   * versions it claims, so that other processes and SQL can tell runs no live executor would claim. NOTE: the
   * renewal takes its times from the inserted row (the columns' `now()` defaults): Citus refuses `now()` in
   * `DO UPDATE SET` (`executors` is a Citus local table there). On Citus, then takes its `lease` in each queue.
   */
  async register(executorId: string, runs?: ExecutorRuns, lease?: ExecutorLease): Promise<void> {
    await this.database.query(
      `INSERT INTO ${this.executors} (executor_id, hostname, pid, queues, workflows) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (executor_id) DO UPDATE
       SET hostname = excluded.hostname, pid = excluded.pid, started_at = excluded.started_at,
           heartbeat_at = excluded.heartbeat_at,
           queues = excluded.queues, workflows = excluded.workflows`,
      [executorId, hostname(), process.pid, runs?.queues ?? null, runs ? JSON.stringify(runs.workflows) : null],
      { idempotent: true },
    );
    if (this.database.citus && lease) await this.leases.take(executorId, lease.queues, lease.ms);
  }

  /**
   * Renews the lease (on Citus, its `lease` in each queue too); false when the row is gone (another executor declared
   * this one dead) or, on Citus, one of its queues' leases is.
   */
  async heartbeat(executorId: string, lease?: ExecutorLease): Promise<boolean> {
    const rows = await this.database.query(
      `UPDATE ${this.executors} SET heartbeat_at = now() WHERE executor_id = $1 RETURNING executor_id`,
      [executorId],
      { idempotent: true },
    );
    if (rows.length !== 1) return false;
    if (!this.database.citus || !lease) return true;
    return this.leases.renew(executorId, lease.queues, lease.ms);
  }

  /**
   * Ends the executor's lease at once (on Citus, its `lease` in each queue too), as if it had expired: the next sweep
   * of any process deletes its row and recovers what it leaves PENDING (see `recoverExpired`). It registers nothing
   * from then on (`workflows` empty), so that no version or name is taken from it meanwhile.
   */
  async remove(executorId: string, lease?: ExecutorLease): Promise<void> {
    await this.database.query(
      `UPDATE ${this.executors} SET heartbeat_at = '-infinity', workflows = '[]' WHERE executor_id = $1`,
      [executorId],
      { idempotent: true },
    );
    if (this.database.citus && lease) await this.leases.remove(executorId, lease.queues);
  }

  /**
   * Why this executor should stop running some of `runs`: those no longer PENDING under it, each with the reason to
   * give its body (cancelled, timed out, or taken over after a lost lease) and, for a cancel, the run it ended. One
   * statement per queue, each naming its queue (on Citus, it runs on the queue's node).
   */
  async notOwned(executorId: string, runs: readonly HeldRun[]): Promise<NotOwnedWorkflow[]> {
    const idsByQueue = new Map<string, string[]>();
    for (const { workflowId, queueName } of runs) {
      idsByQueue.set(queueName, [...(idsByQueue.get(queueName) ?? []), workflowId]);
    }
    const found = await Promise.all(
      [...idsByQueue].map(([queueName, workflowIds]) =>
        this.database.query<RunStateRow>(
          `SELECT queue_name, workflow_id, status, error->>'name' AS error_name, attempts, executor_id
           FROM ${this.tables.workflows} WHERE queue_name = $1 AND workflow_id = ANY($2::text[])`,
          [queueName, workflowIds],
          { idempotent: true },
        ),
      ),
    );
    const rowsOf = new Map<string, RunStateRow[]>();
    for (const row of found.flat()) {
      const key = JSON.stringify([row.queue_name, row.workflow_id]);
      rowsOf.set(key, [...(rowsOf.get(key) ?? []), row]);
    }
    return runs.flatMap(({ workflowId, queueName }) => {
      const rows = rowsOf.get(JSON.stringify([queueName, workflowId])) ?? [];
      if (rows.some((row) => row.status === 'PENDING' && row.executor_id === executorId)) return [];
      const row = rows.find((candidate) => candidate.status === 'CANCELLED') ?? rows[0];
      const reason =
        row?.status !== 'CANCELLED'
          ? 'ownership-lost'
          : row.error_name === 'WorkflowTimeoutError'
            ? 'timed-out'
            : 'cancelled';
      return [{ workflowId, reason, attempt: row?.attempts ?? undefined }];
    });
  }

  /**
   * Puts back in their queue the workflows PENDING under this executor that it is not running: taken by a claim
   * whose answer was lost with its connection. NOTE: the caller holds every claim of this process meanwhile, so
   * nothing is claimed between reading `runningIds` and this statement.
   */
  async releaseUnknown(executorId: string, queueName: string, runningIds: string[]): Promise<string[]> {
    const rows = await moveIntoReady(
      this.database,
      this.tables.ready,
      `UPDATE ${this.workflows}
       SET status = ${STATUS_SQL.ENQUEUED}, executor_id = NULL, updated_at = now()
       WHERE queue_name = $3 AND status = ${STATUS_SQL.PENDING} AND executor_id = $1
         AND workflow_id <> ALL($2::text[])
       RETURNING ${READY_ROW_COLUMNS}`,
      [executorId, runningIds, queueName],
    );
    if (rows.length > 0) await this.database.query(NOTIFY_SQL, [this.database.wakeUpChannel, [queueName]]);
    return rows.map((row) => row.workflow_id);
  }

  /** Recovers the PENDING workflows of a queue left under this executor ID by an earlier process with the same ID. */
  recoverOwn(executorId: string, queueName: string): Promise<RecoveredWorkflow[]> {
    return this.inTransaction((query) => this.recoverRuns(query, queueName, [executorId]), [queueName]);
  }

  /**
   * Recovers the runs of executors whose lease expired. On one server, in one transaction: the expired executors'
   * rows deleted (each waits for the claims in flight that hold it, see `WorkflowClaimer`), then their PENDING runs in
   * the queues their rows list (every queue when a row lists none) taken back, so that no crash between the two
   * leaves a run without an executor that anyone would recover. On Citus, the expired rows are deleted on the
   * coordinator, and each of `queueNames` (stored names) is swept on its node (`recoverExpiredInQueue`), one queue's
   * failure not keeping the others from being swept (the first is thrown after). No queue's rows are read unless an
   * executor that ran there expired.
   */
  async recoverExpired(leaseMs: number, queueNames: readonly string[]): Promise<RecoveredWorkflow[]> {
    if (this.database.citus) return this.recoverExpiredOnTheirNodes(leaseMs, queueNames);
    const recovered = await this.database.transaction(async (query) => {
      const dead = await query<{ executor_id: string; queues: string[] | null }>(
        `DELETE FROM ${this.executors} WHERE heartbeat_at < now() - $1::float8 * interval '1 millisecond'
         RETURNING executor_id, queues`,
        [leaseMs],
      );
      if (dead.length === 0) return [];
      const everyQueue = dead.some((row) => row.queues === null)
        ? (await query<{ queue_name: string }>(`SELECT queue_name FROM ${this.database.schemaSql}.queues`)).map(
            (row) => row.queue_name,
          )
        : [];
      const rows: RecoveredWorkflow[] = [];
      for (const queueName of new Set([...everyQueue, ...dead.flatMap((row) => row.queues ?? [])])) {
        const ids = dead.filter((row) => row.queues === null || row.queues.includes(queueName));
        rows.push(
          ...(await this.recoverRuns(
            query,
            queueName,
            ids.map((row) => row.executor_id),
          )),
        );
      }
      return rows;
    });
    await sendWakeUpsLeftToCaller(this.database, [...new Set(recovered.map((row) => row.queueName))]);
    return recovered;
  }

  private async recoverExpiredOnTheirNodes(
    leaseMs: number,
    queueNames: readonly string[],
  ): Promise<RecoveredWorkflow[]> {
    await this.database.query(
      `DELETE FROM ${this.executors} WHERE heartbeat_at < now() - $1::float8 * interval '1 millisecond'`,
      [leaseMs],
    );
    const recovered: RecoveredWorkflow[] = [];
    let failure: { error: unknown } | undefined;
    for (const queueName of queueNames) {
      try {
        recovered.push(
          ...(await this.inTransaction(
            async (query) => {
              const expired = await query<{ executor_id: string }>(this.leases.deleteExpiredSql, [queueName]);
              if (expired.length === 0) return [];
              return this.recoverRuns(
                query,
                queueName,
                expired.map((row) => row.executor_id),
              );
            },
            [queueName],
          )),
        );
      } catch (error) {
        failure ??= { error };
      }
    }
    if (failure) throw failure.error;
    return recovered;
  }

  /**
   * Recovers a queue's PENDING runs of executors that are gone without a trace: no row in `executors` (on Citus, not
   * live there and without a lease in the queue). A scan of the queue's rows, once per queue when a worker starts:
   * such runs come from processes of an older release, or from rows deleted by hand; the sweep recovers those of
   * executors that expire (`recoverExpired`).
   */
  recoverOrphans(queueName: string): Promise<RecoveredWorkflow[]> {
    if (this.database.citus) return this.recoverOrphansOnItsNode(queueName);
    return this.recoverInQueue(
      queueName,
      `SELECT w.workflow_id, w.queue_name, w.active_deduplication_id FROM ${this.workflows} AS w
       WHERE w.queue_name = $3 AND w.status = ${STATUS_SQL.PENDING} AND w.executor_id <> ALL($2::text[])
         AND NOT EXISTS (SELECT 1 FROM ${this.executors} AS e WHERE e.executor_id = w.executor_id)
       FOR UPDATE OF w SKIP LOCKED`,
      [],
    );
  }

  /**
   * On Citus, where the executors stay on the coordinator and a statement may not join them to a queue's rows: the
   * live executors read on the coordinator; then, in one transaction on the queue's node, the queue's PENDING rows of
   * executors that are neither live nor hold a lease in the queue are recovered (`CitusExecutorLeases`).
   * NOTE: a row claimed after the coordinator's read (by an executor that registered meanwhile) is newer than the
   * read's time and left alone.
   */
  private async recoverOrphansOnItsNode(queueName: string): Promise<RecoveredWorkflow[]> {
    const [live] = await this.database.query<{ executor_ids: string[]; read_at: Date }>(
      `SELECT array(SELECT executor_id FROM ${this.executors}) AS executor_ids, clock_timestamp() AS read_at`,
      [],
    );
    return this.recoverInQueue(
      queueName,
      `SELECT w.workflow_id, w.queue_name, w.active_deduplication_id FROM ${this.workflows} AS w
       WHERE w.queue_name = $3 AND w.status = ${STATUS_SQL.PENDING} AND w.executor_id <> ALL($2::text[])
         AND w.updated_at < $4::timestamptz AND ${this.leases.noLeaseInQueueSql('$3')}
       FOR UPDATE OF w SKIP LOCKED`,
      live.executor_ids,
      [live.read_at],
    );
  }

  /** The rows of a queue that `orphansSql` locks, recovered in a transaction of their own (see `recover`). */
  private recoverInQueue(
    queueName: string,
    orphansSql: string,
    parameter: unknown,
    moreParams: unknown[] = [],
  ): Promise<RecoveredWorkflow[]> {
    return this.inTransaction(
      (query) => this.recover(query, orphansSql, parameter, queueName, moreParams),
      [queueName],
    );
  }

  /** The PENDING runs of `executorIds` in a queue, recovered in `query`'s transaction (a scan of the queue's rows). */
  private recoverRuns(query: Query, queueName: string, executorIds: string[]): Promise<RecoveredWorkflow[]> {
    return this.recover(
      query,
      `SELECT w.workflow_id, w.queue_name, w.active_deduplication_id FROM ${this.workflows} AS w
       WHERE w.queue_name = $3 AND w.status = ${STATUS_SQL.PENDING} AND w.executor_id = ANY($2::text[])
       FOR UPDATE OF w SKIP LOCKED`,
      executorIds,
      queueName,
    );
  }

  /** Runs `work` in a transaction and sends, after it, the wake-ups of the queues whose runs it recovered (on Citus). */
  private async inTransaction(
    work: (query: Query) => Promise<RecoveredWorkflow[]>,
    queues: string[],
  ): Promise<RecoveredWorkflow[]> {
    const recovered = await this.database.transaction((query) => work((sql, params) => query(sql, params)));
    await sendWakeUpsLeftToCaller(this.database, recovered.length > 0 ? queues : []);
    return recovered;
  }

  /**
   * Recovers the rows `orphansSql` locks ($2 its parameter, $3 the queue, then `moreParams`), in `query`'s
   * transaction: ENQUEUED again (with their ready rows), or dead-lettered past their recovery budget, in which case
   * their keys go to the follow-ups waiting for them (on one server through the hand-over function the statement
   * calls; on Citus in a statement of its own after it). Wake-ups: on one server the statement's; on Citus the
   * caller's (`inTransaction`).
   */
  private async recover(
    query: Query,
    orphansSql: string,
    parameter: unknown,
    queueName: string,
    moreParams: unknown[] = [],
  ): Promise<RecoveredWorkflow[]> {
    const citus = this.database.citus;
    const deadLetteredKeys = `SELECT queue_name, held_key AS key FROM recovered
          WHERE status = ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED}`;
    const sql = `WITH orphans AS (${orphansSql}),
       recovered AS (
         UPDATE ${this.workflows} AS w
         SET status = CASE WHEN ${DEAD_LETTERED} THEN ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED}
                           ELSE ${STATUS_SQL.ENQUEUED} END,
             active_deduplication_id = CASE WHEN ${DEAD_LETTERED} THEN NULL ELSE w.active_deduplication_id END,
             completed_at = ${
               citus
                 ? nowPlusMsSql(true, `CASE WHEN ${DEAD_LETTERED} THEN 0 END`)
                 : `CASE WHEN ${DEAD_LETTERED} THEN now() END`
             },
             recovery_attempts = w.recovery_attempts + 1,
             executor_id = NULL,
             updated_at = now()
         FROM orphans WHERE w.queue_name = $3 AND w.workflow_id = orphans.workflow_id
         RETURNING w.workflow_id, w.queue_name, w.workflow_name, w.status, orphans.active_deduplication_id AS held_key,
                   w.priority, w.seq, w.partition_key
       ),
       ${citus ? '' : `recovered_ready AS (${insertReadyRowsSql(this.tables.ready, 'recovered')}),`}
       ${citus ? '' : `${handOverCallSql(this.tables, deadLetteredKeys, '$1')},`}
       ${wakeUpCteSql(citus, 'woken', '$1', 'recovered')}
       SELECT workflow_id, queue_name, workflow_name, status, held_key, priority, seq, partition_key,
              (SELECT count(*) FROM woken) AS woken
              ${citus ? '' : `, ${END_WAKE_UPS_SQL} AS handed_over`}
       FROM recovered`;
    const params = [this.database.wakeUpChannel, parameter, queueName, ...moreParams];
    type Row = WorkflowRefRow & ReadyRow & { status: RecoveredWorkflow['status']; held_key: string | null };
    const recovered = await query<Row>(sql, params);
    if (citus) {
      await insertReadyRowsOnCitus(
        query,
        this.tables.ready,
        recovered.filter((row) => row.status === 'ENQUEUED'),
      );
      const keys = recovered.flatMap((row) =>
        row.status === 'MAX_RECOVERY_ATTEMPTS_EXCEEDED' && row.held_key !== null ? [row.held_key] : [],
      );
      await handOverKeysOnCitus(query, this.workflows, queueName, keys, this.database.wakeUpChannel);
    }
    return recovered.map((row) => ({ ...toWorkflowRef(row), status: row.status }));
  }
}
