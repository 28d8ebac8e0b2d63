import { onePerDatabase } from '../connection/one-per-database';
import type { QueueDatabase } from '../connection/queue-database';
import { STATUS_SQL } from '../tables/workflow-status.sql';
import { workflowTables } from '../tables/workflow-tables';
import { NOTIFY_SQL } from '../connection/wake-ups.sql';
import { READY_ROW_COLUMNS, moveIntoReady } from '../tables/ready-rows.sql';

/** What `setEvent` records at its position: the step `setEvent <key>`, whose output is the value (since 1.1). */
export const SET_EVENT_STEP_PREFIX = 'setEvent ';

export function setEventStepName(key: string): string {
  return `${SET_EVENT_STEP_PREFIX}${key}`;
}

/**
 * The SQL of workflow events (`setEvent` / `getEvent`): the last value of each key a workflow published, keyed by
 * queue, workflow and key; the workflows suspended in a `getEvent`, made due when the key is set; and the waiters of
 * this process outside workflow bodies, woken at once when a workflow of this process sets a key (other processes'
 * values are found by polling).
 */
export class WorkflowEventStore {
  private readonly events: string;
  private readonly eventWaits: string;
  private readonly active: string;
  private readonly ready: string;
  private readonly workflows: string;
  private readonly waiters = new Map<string, Set<() => void>>();

  constructor(private readonly database: QueueDatabase) {
    const tables = workflowTables(database.schemaSql);
    this.events = tables.events;
    this.eventWaits = tables.eventWaits;
    this.active = tables.active;
    this.ready = tables.ready;
    this.workflows = tables.workflows;
  }

  /**
   * Sets `key` of a running workflow to `valueJson` (the last value wins), stamped with the workflow's creation
   * time for retention. False when the workflow is not running (cancelled meanwhile): nothing is written.
   */
  async set(queueName: string, workflowId: string, key: string, valueJson: string): Promise<boolean> {
    const rows = await this.database.query(
      `INSERT INTO ${this.events} AS e (queue_name, workflow_id, key, value, updated_at, workflow_created_at)
       SELECT w.queue_name, w.workflow_id, $3, $4::json, now(), w.created_at FROM ${this.active} AS w
       WHERE w.queue_name = $1 AND w.workflow_id = $2 AND w.status = ${STATUS_SQL.PENDING}
       ON CONFLICT (queue_name, workflow_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
       RETURNING e.key`,
      [queueName, workflowId, key, valueJson],
      { idempotent: true },
    );
    this.wake(workflowId, key);
    if (rows.length === 1) await this.wakeSuspendedWaiters(queueName, workflowId, key);
    return rows.length === 1;
  }

  /**
   * Makes due the workflows suspended in a `getEvent` of `key` of `workflowId` (registered in `event_waits` by
   * `WaitingStore.suspendForEvent`), and forgets their registrations: a look (usually finding none), then, in one
   * transaction, the registrations taken and each waiter's queue woken, naming it. The look is a statement after the
   * value's own, so that it sees every registration committed before the value was (see `suspendForEvent` for the
   * other side).
   */
  private async wakeSuspendedWaiters(queueName: string, workflowId: string, key: string): Promise<void> {
    const target = `queue_name = $1 AND workflow_id = $2 AND key = $3`;
    const params = [queueName, workflowId, key];
    const waiting = await this.database.query(`SELECT 1 FROM ${this.eventWaits} WHERE ${target} LIMIT 1`, params, {
      idempotent: true,
    });
    if (waiting.length === 0) return;
    await this.database.transaction(async (query) => {
      const waiters = await query<{ waiter_queue: string; waiter_id: string }>(
        `DELETE FROM ${this.eventWaits} WHERE ${target} RETURNING waiter_queue, waiter_id`,
        params,
      );
      const byQueue = new Map<string, string[]>();
      for (const row of waiters) {
        byQueue.set(row.waiter_queue, [...(byQueue.get(row.waiter_queue) ?? []), row.waiter_id]);
      }
      const woken: string[] = [];
      for (const [waiterQueue, ids] of byQueue) {
        const due = await moveIntoReady(
          this.database,
          this.ready,
          `UPDATE ${this.active}
           SET status = ${STATUS_SQL.ENQUEUED}, not_before = NULL, waiting_topic = NULL, updated_at = now()
           WHERE queue_name = $1 AND workflow_id = ANY($2::text[]) AND status = ${STATUS_SQL.WAITING}
           RETURNING ${READY_ROW_COLUMNS}`,
          [waiterQueue, ids],
          { query },
        );
        if (due.length > 0) woken.push(waiterQueue);
      }
      if (woken.length > 0) await query(NOTIFY_SQL, [this.database.wakeUpChannel, woken]);
    });
  }

  /** The queue of a workflow, or undefined when no workflow has this ID (yet). */
  async queueOf(workflowId: string): Promise<string | undefined> {
    const rows = await this.database.query<{ queue_name: string }>(
      `SELECT queue_name FROM ${this.workflows} WHERE workflow_id = $1 LIMIT 1`,
      [workflowId],
      { idempotent: true },
    );
    return rows[0]?.queue_name;
  }

  /** The value of `key` as JSON text, or undefined while it is not set. */
  async get(queueName: string, workflowId: string, key: string): Promise<{ valueJson: string } | undefined> {
    const rows = await this.database.query<{ value: string }>(
      `SELECT value::text AS value FROM ${this.events} WHERE queue_name = $1 AND workflow_id = $2 AND key = $3`,
      [queueName, workflowId, key],
      { idempotent: true },
    );
    return rows[0] && { valueJson: rows[0].value };
  }

  /** Resolves when this process sets `key` of `workflowId`, or after `timeoutMs`, whichever comes first. */
  waitFor(workflowId: string, key: string, timeoutMs: number): Promise<void> {
    const id = JSON.stringify([workflowId, key]);
    return new Promise((resolve) => {
      const waiters = this.waiters.get(id) ?? new Set();
      this.waiters.set(id, waiters);
      const done = () => {
        clearTimeout(timer);
        waiters.delete(done);
        if (waiters.size === 0) this.waiters.delete(id);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      waiters.add(done);
    });
  }

  private wake(workflowId: string, key: string): void {
    for (const done of [...(this.waiters.get(JSON.stringify([workflowId, key])) ?? [])]) done();
  }
}

/**
 * The event store of a module's database: one per database, so that `setEvent` (called from a workflow's code,
 * which reaches the database through its execution) and `QueueService.getEvent` share the waiters of this process.
 */
export const workflowEventStore = onePerDatabase((database) => new WorkflowEventStore(database));
