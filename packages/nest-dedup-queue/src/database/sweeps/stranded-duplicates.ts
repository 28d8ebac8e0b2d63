import { DUPLICATE_TOPIC, countAndWakeSql } from '../messages/message.store';
import type { NewWorkflow } from '../workflows/new-workflow';
import type { Query, QueueDatabase } from '../connection/queue-database';
import { WorkflowInserter } from '../workflows/enqueue/workflow-inserter';
import { ACTIVE_TABLE_WORKFLOW_STATUSES_SQL, STATUS_SQL } from '../tables/workflow-status.sql';
import { WorkflowTables, workflowTables } from '../tables/workflow-tables';
import { sendWakeUpsLeftToCaller } from '../connection/wake-ups.sql';
import { newWorkflowId } from '../../utils/workflow-id';

/** A finished holder's unreceived duplicate, with what the next workflow of its key takes from the holder. */
interface StrandedRow {
  seq: string;
  workflow_id: string;
  message: string;
  deduplication_id: string;
  workflow_name: string;
  workflow_version: number;
  priority: number;
  timeout_ms: number | null;
  max_attempts: number;
  max_recovery_attempts: number;
  partition_key: string | null;
  dedup_window_ms: number | null;
  release_key_on_error: boolean;
}

/** What one delivery did: how many messages went to an unfinished holder, and the workflows it started. */
export interface StrandedDelivery {
  delivered: number;
  started: string[];
}

const MAX_ROUNDS = 5;

/**
 * Delivers the `onDuplicate: 'send'` messages that a holder left unreceived when it ended (or that reached it as it
 * was ending): per key, in the order they were sent, to the key's unfinished holder when there is one; otherwise
 * the oldest starts the next workflow of the key (the finished holder's workflow and options with the message's
 * arguments; it takes the key over a deduplication window, as a `queue-next` follow-up does) and the others go to
 * it. One transaction per queue: messages that another process is delivering are skipped, and a crash delivers
 * nothing twice (the next delivery starts over).
 */
export class StrandedDuplicates {
  private readonly tables: WorkflowTables;
  private readonly messages: string;

  constructor(private readonly database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
    this.messages = `${database.schemaSql}.workflow_messages`;
  }

  async deliver(queueName: string): Promise<StrandedDelivery> {
    if (!(await this.anyStranded(queueName))) return { delivered: 0, started: [] };
    return this.database.transaction(async (query) => {
      const rows = await query<StrandedRow>(
        `SELECT m.seq::text AS seq, m.workflow_id, m.message::text AS message, h.deduplication_id, h.workflow_name,
                h.workflow_version, h.priority, h.timeout_ms, h.max_attempts, h.max_recovery_attempts, h.partition_key,
                h.dedup_window_ms, h.release_key_on_error
         ${this.strandedSql()}
         ORDER BY m.seq
         FOR UPDATE OF m SKIP LOCKED`,
        [queueName, DUPLICATE_TOPIC],
      );
      const byKey = new Map<string, StrandedRow[]>();
      for (const row of rows) byKey.set(row.deduplication_id, [...(byKey.get(row.deduplication_id) ?? []), row]);
      const result: StrandedDelivery = { delivered: 0, started: [] };
      for (const [key, messages] of byKey) await this.deliverKey(query, queueName, key, messages, result);
      return result;
    });
  }

  /** A cheap look first (outside any transaction): most sweeps find nothing. */
  private async anyStranded(queueName: string): Promise<boolean> {
    const [row] = await this.database.query<{ any: boolean }>(
      `SELECT EXISTS (SELECT 1 ${this.strandedSql()}) AS any`,
      [queueName, DUPLICATE_TOPIC],
      { idempotent: true },
    );
    return row.any;
  }

  /**
   * The unreceived duplicates (`m`) of queue $1 (topic $2) whose workflow (`h`, in the history) had a key and is no
   * longer unfinished: only its key record may be left in the active table.
   */
  private strandedSql(): string {
    return `FROM ${this.messages} AS m
         JOIN ${this.tables.history} AS h ON h.queue_name = $1 AND h.workflow_id = m.workflow_id
           AND h.created_at = m.workflow_created_at
         WHERE m.queue_name = $1 AND m.topic = $2 AND m.received_at IS NULL AND h.deduplication_id IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM ${this.tables.active} AS a
                           WHERE a.queue_name = $1 AND a.workflow_id = m.workflow_id
                             AND a.status IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL})`;
  }

  private async deliverKey(
    query: Query,
    queueName: string,
    key: string,
    messages: StrandedRow[],
    result: StrandedDelivery,
  ): Promise<void> {
    const inserter = new WorkflowInserter(this.database, query, true);
    for (let round = 0; round < MAX_ROUNDS; round++) {
      const [holder] = await query<{ workflow_id: string }>(
        `SELECT workflow_id FROM ${this.tables.active}
         WHERE queue_name = $1 AND active_deduplication_id = $2 AND status IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL}
         FOR UPDATE`,
        [queueName, key],
      );
      if (holder) {
        result.delivered += await this.moveTo(query, queueName, holder.workflow_id, messages);
        return;
      }
      await query(
        `DELETE FROM ${this.tables.active}
         WHERE queue_name = $1 AND active_deduplication_id = $2 AND status NOT IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL}`,
        [queueName, key],
      );
      const [first, ...rest] = messages;
      const next = nextWorkflow(queueName, first);
      if ((await inserter.insert(next)).outcome !== 'inserted') continue;
      await query(
        `UPDATE ${this.messages} SET received_at = now() WHERE queue_name = $1 AND workflow_id = $2 AND seq = $3`,
        [queueName, first.workflow_id, first.seq],
      );
      result.started.push(next.workflowId);
      if (rest.length > 0) result.delivered += await this.moveTo(query, queueName, next.workflowId, rest);
      return;
    }
  }

  /** Moves the messages, in their order, to the unfinished workflow `workflowId`, counting them and waking it. */
  private async moveTo(query: Query, queueName: string, workflowId: string, messages: StrandedRow[]): Promise<number> {
    const [row] = await query<{ moved: number; woken: number }>(
      `WITH target AS (
         SELECT workflow_id, created_at, status = ${STATUS_SQL.WAITING} AND waiting_topic = $4 AS wakes
         FROM ${this.tables.active} WHERE queue_name = $1 AND workflow_id = $2
         FOR UPDATE
       ),
       moved AS (
         DELETE FROM ${this.messages}
         WHERE queue_name = $1 AND workflow_id = ANY($6::text[]) AND seq = ANY($3::bigint[])
         RETURNING seq, topic, message, idempotency_key
       ),
       inserted AS (
         INSERT INTO ${this.messages} (queue_name, workflow_id, workflow_created_at, topic, message, idempotency_key)
         SELECT $1, t.workflow_id, t.created_at, m.topic, m.message, m.idempotency_key
         FROM moved AS m CROSS JOIN target AS t
         ORDER BY m.seq
         RETURNING workflow_id
       ),
       ${countAndWakeSql(
         this.tables,
         '$1',
         'SELECT t.workflow_id, (SELECT count(*)::int FROM inserted) AS messages, t.wakes FROM target AS t',
         '$5',
         this.database.citus,
       )}
       SELECT (SELECT count(*)::int FROM inserted) AS moved, (SELECT count(*) FROM wake_ups) AS woken`,
      [
        queueName,
        workflowId,
        messages.map((message) => message.seq),
        DUPLICATE_TOPIC,
        this.database.wakeUpChannel,
        [...new Set(messages.map((message) => message.workflow_id))],
      ],
    );
    await sendWakeUpsLeftToCaller(this.database, row.woken > 0 ? [queueName] : [], query);
    return row.moved;
  }
}

/** The next workflow of a key whose holder ended with `message` unreceived: the holder's, with its arguments. */
function nextWorkflow(queueName: string, message: StrandedRow): NewWorkflow {
  return {
    workflowId: newWorkflowId(),
    workflowIdGiven: false,
    queueName,
    workflowName: message.workflow_name,
    version: message.workflow_version,
    deduplicationId: message.deduplication_id,
    inputsJson: message.message,
    timeoutMs: message.timeout_ms,
    deadlineAt: null,
    maxAttempts: message.max_attempts,
    maxRecoveryAttempts: message.max_recovery_attempts,
    partitionKey: message.partition_key,
    priority: message.priority,
    runAt: null,
    delayMs: null,
    maxDelayMs: null,
    deduplicationWindowMs: message.dedup_window_ms,
    releaseKeyOnError: message.release_key_on_error,
    traceContext: null,
    parentWorkflowId: null,
    forkedFrom: null,
  };
}
