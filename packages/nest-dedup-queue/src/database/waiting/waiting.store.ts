import type { QueueDatabase } from '../connection/queue-database';
import { READY_ROW_COLUMNS, moveIntoReady } from '../tables/ready-rows.sql';
import { ownedRowSql } from '../steps/owned-row.sql';
import { usedParameters } from '../connection/sql-parameters';
import { STATUS_SQL } from '../tables/workflow-status.sql';
import { WorkflowTables, workflowTables } from '../tables/workflow-tables';

/** One run of a workflow, as the statements that fence on it name it. */
export interface OwnedRun {
  queueName: string;
  workflowId: string;
  executorId: string;
  /** The run's claim count: only this run may record or suspend. */
  attempt: number;
}

/** The event a `getEvent` waits for: `key` of workflow `workflowId` of queue `queueName`. */
export interface EventTarget {
  queueName: string;
  workflowId: string;
  key: string;
}

/** What `promoteDue` did: how many waiting workflows became due, and when the next one wakes. */
export interface Promotion {
  woken: number;
  /** The next waiting workflow's wake-up, by the database's clock; null when none waits with a time. */
  nextAt: Date | null;
  /** The database's clock when it looked. */
  now: Date;
}

/**
 * The SQL of waiting workflows (`sleep`, `recv`, `getEvent`): record a point in time at a step position (a wake-up or a
 * deadline, by the database's clock), suspend a running workflow into `WAITING` (no executor, no slot, its key kept,
 * `not_before` its wake-up), and make due the waiting workflows whose time has come, for the claim to take them.
 */
export class WaitingStore {
  private readonly tables: WorkflowTables;
  private readonly eventWaits: string;

  constructor(private readonly database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
    this.eventWaits = this.tables.eventWaits;
  }

  /**
   * Records at step `index` the time `ms` from now by the database's clock (null: no time), if the run still owns
   * its workflow. Returns the recorded time as JSON text (a time recorded earlier at that index wins, for a resent
   * statement), null for no time, or undefined when the run no longer owns the workflow.
   */
  async recordTime(run: OwnedRun, index: number, name: string, ms: number | null): Promise<string | null | undefined> {
    const rows = await this.database.query<{ output: string | null }>(
      `INSERT INTO ${this.tables.steps}
         (workflow_id, step_index, step_name, output, started_at, completed_at, queue_name, workflow_created_at)
       SELECT $1, $2, $3, to_json(now() + $4::float8 * interval '1 millisecond'), now(), now(),
              owned.queue_name, owned.created_at
       FROM (${ownedRowSql(this.tables.active, { queue: '$5', workflow: '$1', executor: '$6', attempt: '$7' })}) AS owned
       ON CONFLICT (queue_name, workflow_id, step_index, workflow_created_at) DO UPDATE SET step_name = excluded.step_name
       RETURNING output::text AS output`,
      [run.workflowId, index, name, ms, run.queueName, run.executorId, run.attempt],
      { idempotent: true },
    );
    return rows.length === 0 ? undefined : rows[0].output;
  }

  /**
   * Suspends the run: its workflow becomes WAITING until `wakeAt` (an ISO time, or null for no time: 1.0 stored
   * `'infinity'`, which reads the same), without an executor, waiting on `topic` (a `recv`) or nothing (a `sleep`).
   * With `messagesSeen`, only if no message was sent to it since it counted them. False when the row did not change
   * (not owned, or a message came).
   */
  async suspend(
    run: OwnedRun,
    wakeAt: string | null,
    topic: string | null,
    messagesSeen: number | null,
  ): Promise<boolean> {
    const rows = await this.database.query(
      `UPDATE ${this.tables.active}
       SET status = ${STATUS_SQL.WAITING}, executor_id = NULL, not_before = $5::timestamptz, waiting_topic = $6,
           updated_at = now()
       WHERE queue_name = $1 AND workflow_id = $2 AND status = ${STATUS_SQL.PENDING} AND executor_id = $3
         AND attempts = $4 AND ($7::int IS NULL OR messages_sent = $7)
       RETURNING workflow_id`,
      [run.queueName, run.workflowId, run.executorId, run.attempt, wakeAt, topic, messagesSeen],
    );
    return rows.length === 1;
  }

  /**
   * Suspends the run in a `getEvent` until `wakeAt` (an ISO time, or null for none) and registers it as a waiter for
   * `key` of workflow `target` (of queue `targetQueue`), whose `setEvent` makes it due (`WorkflowEventStore.set`).
   * False when the run no longer owns its workflow. On one server both in one statement; on Citus, in one
   * transaction, router statements: the run's row read, the registration (on the target's node), the suspension.
   * NOTE: the caller looks for the value again after this returns, and wakes the workflow if it is there
   * (`wakeOwn`): a value set while this ran was either seen by the setter's wake-up statement (which runs after its
   * value committed) or is seen by that look.
   */
  async suspendForEvent(run: OwnedRun, wakeAt: string | null, target: EventTarget): Promise<boolean> {
    const owned = `queue_name = $1 AND workflow_id = $2 AND status = ${STATUS_SQL.PENDING} AND executor_id = $3
         AND attempts = $4`;
    const suspend = `UPDATE ${this.tables.active}
       SET status = ${STATUS_SQL.WAITING}, executor_id = NULL, not_before = $5::timestamptz, waiting_topic = NULL,
           updated_at = now()
       WHERE ${owned}
       RETURNING queue_name, workflow_id, created_at`;
    const register = (waiter: string) => `INSERT INTO ${this.eventWaits}
         (queue_name, workflow_id, key, waiter_queue, waiter_id, waiter_created_at)
       ${waiter}
       ON CONFLICT DO NOTHING`;
    const params = [
      run.queueName,
      run.workflowId,
      run.executorId,
      run.attempt,
      wakeAt,
      target.queueName,
      target.workflowId,
      target.key,
    ];
    if (!this.database.citus) {
      const rows = await this.database.query(
        `WITH suspended AS (${suspend}),
         registered AS (${register('SELECT $6, $7, $8, queue_name, workflow_id, created_at FROM suspended')})
         SELECT workflow_id FROM suspended`,
        params,
      );
      return rows.length === 1;
    }
    return this.database.transaction(async (query) => {
      const rows = await query<{ created_at: Date }>(
        `SELECT created_at FROM ${this.tables.active} WHERE ${owned}`,
        params.slice(0, 4),
      );
      if (rows.length === 0) return false;
      await query(...usedParameters(register('VALUES ($6, $7, $8, $1, $2, $9)'), [...params, rows[0].created_at]));
      return (await query(suspend, params.slice(0, 5))).length === 1;
    });
  }

  /**
   * Makes the run's workflow due again if it is still WAITING in that run (the value it suspended for came as it
   * suspended), and wakes its queue's workers.
   */
  async wakeOwn(run: OwnedRun): Promise<void> {
    const rows = await moveIntoReady(
      this.database,
      this.tables.ready,
      `UPDATE ${this.tables.active}
       SET status = ${STATUS_SQL.ENQUEUED}, not_before = NULL, waiting_topic = NULL, updated_at = now()
       WHERE queue_name = $1 AND workflow_id = $2 AND status = ${STATUS_SQL.WAITING} AND attempts = $3
       RETURNING ${READY_ROW_COLUMNS}`,
      [run.queueName, run.workflowId, run.attempt],
    );
    if (rows.length > 0) await this.wakeWorkers(run.queueName);
  }

  /** Forgets the run's registration as a waiter for `key` of `target` (its `getEvent` is over). */
  async forgetEventWait(run: OwnedRun, target: EventTarget): Promise<void> {
    await this.database.query(
      `DELETE FROM ${this.eventWaits}
       WHERE queue_name = $1 AND workflow_id = $2 AND key = $3 AND waiter_queue = $4 AND waiter_id = $5`,
      [target.queueName, target.workflowId, target.key, run.queueName, run.workflowId],
      { idempotent: true },
    );
  }

  /**
   * Makes due (ENQUEUED) up to `limit` of a queue's WAITING workflows whose wake-up has come, oldest wake-up first,
   * skipping rows another process is promoting; and reads when the next one wakes.
   */
  async promoteDue(queueName: string, limit: number): Promise<Promotion> {
    const woken = await moveIntoReady(
      this.database,
      this.tables.ready,
      `UPDATE ${this.tables.active} AS w
       SET status = ${STATUS_SQL.ENQUEUED}, waiting_topic = NULL, updated_at = now()
       WHERE w.queue_name = $1 AND w.workflow_id = ANY(ARRAY(
         SELECT workflow_id FROM ${this.tables.active}
         WHERE queue_name = $1 AND wake_at <= now() AND status = ${STATUS_SQL.WAITING}
         ORDER BY wake_at LIMIT $2
         FOR UPDATE SKIP LOCKED))
         AND w.status = ${STATUS_SQL.WAITING}
       RETURNING ${READY_ROW_COLUMNS.replace(/(\w+)/g, 'w.$1')}`,
      [queueName, limit],
      { queryOptions: { prepared: true } },
    );
    const [row] = await this.database.query<{ next_at: Date | null; now: Date }>(
      `SELECT (SELECT min(wake_at) FROM ${this.tables.active}
               WHERE queue_name = $1 AND wake_at > now() AND wake_at < 'infinity') AS next_at,
              now() AS now`,
      [queueName],
      { prepared: true, idempotent: true },
    );
    return { woken: woken.length, nextAt: row.next_at, now: row.now };
  }

  /** Wakes the workers of a queue everywhere (its waiting workflows became due). */
  async wakeWorkers(queueName: string): Promise<void> {
    await this.database.query('SELECT pg_notify($1, $2)', [this.database.wakeUpChannel, queueName], {
      idempotent: true,
    });
  }

  /** The database's clock, in milliseconds since the epoch. */
  async now(): Promise<number> {
    const [row] = await this.database.query<{ now_ms: number }>(
      'SELECT (extract(epoch FROM now()) * 1000)::float8 AS now_ms',
      [],
      { idempotent: true },
    );
    return row.now_ms;
  }
}
