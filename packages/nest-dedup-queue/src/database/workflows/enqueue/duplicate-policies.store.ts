import { SupersededHolderRow, supersedeEndSpec } from './workflow-insert.statements';
import { interruptPayload } from '../interrupt-payload';
import { releaseExpiredKeySql, runEndStatements, windowOpenSql } from '../finish/workflow-finish.sql';
import type { NewWorkflow } from '../new-workflow';
import type { SendResult, SupersedeResult, SupersededWorkflow } from './insert-results';
import { ACTIVE_TABLE_WORKFLOW_STATUSES_SQL, STATUS_SQL } from '../../tables/workflow-status.sql';
import { countAndWakeSql } from '../../messages/message.store';
import { sendWakeUpsLeftToCaller } from '../../connection/wake-ups.sql';
import { EnqueueConnection } from './enqueue-connection';
import { type ReadyRow, insertReadyRowsOnCitus } from '../../tables/ready-rows.sql';
import type { Query } from '../../connection/queue-database';

/** Rolls back a supersede whose insert found the key taken after all. */
class SupersedeLost extends Error {}

/**
 * What the duplicate policies do to the holder of a key: replace a queued holder's arguments, keep the single
 * follow-up of a running one, send it the arguments as a message, or supersede it. Runs where the enqueue runs (see
 * `EnqueueConnection`).
 */
export class DuplicatePolicyStore extends EnqueueConnection {
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
      const rows = await query<ReadyRow>(followUpValues.sql, followUpValues.params.values(workflow));
      await insertReadyRowsOnCitus(query, this.tables.ready, rows);
      return { workflow_id: rows[0]?.workflow_id ?? null, holder_running: true };
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
         this.tables,
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
    const inserted = await query<ReadyRow>(sql, params.values({ workflow, supersedes }));
    await insertReadyRowsOnCitus(query, this.tables.ready, inserted);
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
