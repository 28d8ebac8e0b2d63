import type { TransactionSql } from '../../interfaces/transaction-sql.interface';
import type { QueryOptions, QueueDatabase } from '../connection/queue-database';
import type { StepStore } from '../steps/step.store';
import type { OwnedRun } from '../waiting/waiting.store';
import { STATUS_SQL } from '../tables/workflow-status.sql';
import { sendWakeUpsLeftToCaller, wakeUpCteSql } from '../connection/wake-ups.sql';
import { WorkflowTables, workflowTables } from '../tables/workflow-tables';
import { READY_ROW_COLUMNS, insertReadyRowsSql } from '../tables/ready-rows.sql';

/**
 * The topic of the messages that `onDuplicate: 'send'` delivers to a deduplication key's holder: the duplicate's
 * arguments array. Receive them with `recv(DUPLICATE_TOPIC)`.
 */
export const DUPLICATE_TOPIC = 'dedup-queue:duplicate';

/**
 * The CTEs `counted` and `wake_ups`: each workflow that `targetsSql` selects (`workflow_id`, `messages`: how many
 * messages it was just sent, `wakes`: whether it waits in `recv` on their topic, read from its locked row) counts
 * them in `messages_sent`, and a waiting one becomes due at once; the workers of its queue are woken (on Citus by
 * the caller, see wake-ups.sql.ts).
 */
export function countAndWakeSql(
  tables: WorkflowTables,
  queue: string,
  targetsSql: string,
  channel: string,
  citus: boolean,
): string {
  return `counted AS (
       UPDATE ${tables.active} AS w
       SET messages_sent = w.messages_sent + t.messages, updated_at = now(),
           status = CASE WHEN t.wakes THEN ${STATUS_SQL.ENQUEUED} ELSE w.status END,
           not_before = CASE WHEN t.wakes THEN NULL ELSE w.not_before END,
           waiting_topic = CASE WHEN t.wakes THEN NULL ELSE w.waiting_topic END
       FROM (${targetsSql}) AS t
       WHERE w.queue_name = ${queue} AND w.workflow_id = t.workflow_id
       RETURNING ${READY_ROW_COLUMNS.replace(/(\w+)/g, 'w.$1')}, t.wakes
     ),
     woken_ready AS (${insertReadyRowsSql(tables.ready, '(SELECT * FROM counted WHERE wakes)', true)}),
     ${wakeUpCteSql(citus, 'wake_ups', channel, 'counted WHERE wakes')}`;
}

/** The workflow a message is for, found by its ID alone. */
export interface MessageTarget {
  queueName: string;
  createdAt: Date;
}

/** What a running workflow's `recv` sees before it waits. */
export interface InboxState {
  /** How many messages were ever sent to the workflow: its suspension is conditional on this count. */
  messagesSent: number;
  /** Whether a message of the topic waits to be received. */
  hasMessage: boolean;
}

/**
 * The SQL of messages between workflows: `send` stores a message for a workflow (once per idempotency key) and
 * wakes it if it waits on that topic; `recv` receives the oldest message of a topic not yet received, recording it
 * at its step position in the same transaction. Every statement names the queue: a sender, which knows only the
 * workflow ID, first finds the queue through the view.
 */
export class MessageStore {
  private readonly tables: WorkflowTables;
  private readonly messages: string;

  constructor(private readonly database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
    this.messages = `${database.schemaSql}.workflow_messages`;
  }

  /**
   * The queue and creation time of workflow `workflowId`, or undefined when no workflow has that ID. With
   * `transaction`, these statements run in it (a workflow body's recorded `send`).
   */
  async findTarget(workflowId: string, transaction?: TransactionSql): Promise<MessageTarget | undefined> {
    const rows = await this.query<{ queue_name: string; created_at: Date }>(
      transaction,
      `SELECT queue_name, created_at FROM ${this.tables.workflows} WHERE workflow_id = $1 LIMIT 1`,
      [workflowId],
      { idempotent: true },
    );
    return rows[0] && { queueName: rows[0].queue_name, createdAt: rows[0].created_at };
  }

  /** Stores a message (JSON text); false when its idempotency key was used before for this workflow. */
  async insert(
    target: MessageTarget,
    workflowId: string,
    topic: string,
    messageJson: string,
    idempotencyKey: string | null,
    transaction?: TransactionSql,
  ): Promise<boolean> {
    const rows = await this.query(
      transaction,
      `INSERT INTO ${this.messages} (queue_name, workflow_id, workflow_created_at, topic, message, idempotency_key)
       VALUES ($1, $2, $3, $4, $5::json, $6)
       ON CONFLICT DO NOTHING
       RETURNING seq`,
      [target.queueName, workflowId, target.createdAt, topic, messageJson, idempotencyKey],
    );
    return rows.length === 1;
  }

  /**
   * Counts a message sent to the workflow and, if it waits on `topic`, makes it due and wakes its queue's workers
   * (see `countAndWakeSql`). True when it was woken. NOTE: a `recv` suspends only while the count is what it read
   * along with the messages, so a message stored before this statement is either seen by it or wakes it here.
   */
  async countAndWake(
    queueName: string,
    workflowId: string,
    topic: string,
    transaction?: TransactionSql,
  ): Promise<boolean> {
    const rows = await this.query<{ woken: boolean }>(
      transaction,
      `WITH target AS (
         SELECT workflow_id, 1 AS messages, status = ${STATUS_SQL.WAITING} AND waiting_topic = $3 AS wakes
         FROM ${this.tables.active} WHERE queue_name = $1 AND workflow_id = $2
         FOR UPDATE
       ),
       ${countAndWakeSql(this.tables, '$1', 'SELECT * FROM target', '$4', this.database.citus)}
       SELECT wakes AS woken, (SELECT count(*) FROM wake_ups) AS notified FROM counted`,
      [queueName, workflowId, topic, this.database.wakeUpChannel],
    );
    const woken = rows[0]?.woken === true;
    await sendWakeUpsLeftToCaller(this.database, woken ? [queueName] : [], (sql, params) =>
      this.query(transaction, sql, params),
    );
    return woken;
  }

  /** Runs a statement in `transaction` when given, else on the module's pool (with `options`). */
  private async query<R = Record<string, unknown>>(
    transaction: TransactionSql | undefined,
    sql: string,
    params: unknown[],
    options?: QueryOptions,
  ): Promise<R[]> {
    if (!transaction) return this.database.query<R>(sql, params, options);
    return (await transaction.executeSql(sql, params)).rows as R[];
  }

  /** Whether the run still owns its workflow (undefined if not) and what its inbox holds for `topic`. */
  async inbox(run: OwnedRun, topic: string): Promise<InboxState | undefined> {
    const rows = await this.database.query<{ messages_sent: number; has_message: boolean }>(
      `SELECT messages_sent,
              EXISTS (SELECT 1 FROM ${this.messages}
                      WHERE queue_name = $1 AND workflow_id = $2 AND topic = $5 AND received_at IS NULL) AS has_message
       FROM ${this.tables.active}
       WHERE queue_name = $1 AND workflow_id = $2 AND status = ${STATUS_SQL.PENDING} AND executor_id = $3
         AND attempts = $4`,
      [run.queueName, run.workflowId, run.executorId, run.attempt, topic],
      { idempotent: true },
    );
    return rows[0] && { messagesSent: rows[0].messages_sent, hasMessage: rows[0].has_message };
  }

  /**
   * In one transaction, while the run owns its workflow (its row held FOR SHARE): marks the oldest message of
   * `topic` not yet received as received, and records it at step `index` (named `stepName`). Returns its JSON text,
   * null when there is none, or undefined when the run no longer owns the workflow.
   */
  async receive(
    steps: StepStore,
    run: OwnedRun,
    index: number,
    stepName: string,
    topic: string,
  ): Promise<string | null | undefined> {
    const startedAt = performance.now();
    return steps.transaction(async (manager) => {
      const owned = await steps.lockIfOwned(manager, run.queueName, run.workflowId, run.executorId, run.attempt);
      if (!owned) return undefined;
      const [received] = await manager.query<[{ message: string }[], number]>(
        `UPDATE ${this.messages} SET received_at = now()
         WHERE queue_name = $1 AND workflow_id = $2 AND topic = $3 AND received_at IS NULL
           AND seq = (SELECT min(seq) FROM ${this.messages}
                      WHERE queue_name = $1 AND workflow_id = $2 AND topic = $3 AND received_at IS NULL)
         RETURNING message::text AS message`,
        [run.queueName, run.workflowId, topic],
      );
      const message = received[0]?.message;
      if (message === undefined) return null;
      await steps.insert(manager, owned, {
        workflowId: run.workflowId,
        queueName: run.queueName,
        index,
        name: stepName,
        outputJson: message,
        error: null,
        durationMs: performance.now() - startedAt,
      });
      return message;
    });
  }
}
