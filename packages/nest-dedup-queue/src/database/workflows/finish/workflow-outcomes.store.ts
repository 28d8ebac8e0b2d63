import type { WorkflowErrorInfo } from '../../../interfaces/workflow-status.interface';
import type { Query, QueueDatabase } from '../../connection/queue-database';
import { ENDED_WAKE_UPS_SQL, EndSpec, endWorkflowsSql, keepsKeyInWindowSql } from './workflow-finish.sql';
import { EndingOutcome, RUN_OF_ROW_SQL, endOutcomesOnCitus, runOf } from './outcomes-end.citus';
import type { AttachedClaim } from '../claim/workflow-claimer';
import { STATUS_SQL } from '../../tables/workflow-status.sql';
import { WorkflowTables, workflowTables } from '../../tables/workflow-tables';
import { arrayParameter, usedParameters } from '../../connection/sql-parameters';
import { nowPlusMsSql } from '../../connection/time.sql';
import { NOTIFY_SQL, sendWakeUpsLeftToCaller } from '../../connection/wake-ups.sql';
import {
  READY_ROW_COLUMNS,
  type ReadyRow,
  insertReadyRowsOnCitus,
  insertReadyRowsSql,
} from '../../tables/ready-rows.sql';

/** The parameter arrays of the outcomes' fields. */
const OUTCOME_ARRAYS = {
  status: '$2::text[]',
  output: '$3::text[]',
  error: '$4::text[]',
  retry_delay_ms: '$5::float8[]',
} as const;

/**
 * A field of the outcome of the active row `w`: its element in the parameter array, found by the row's run
 * (`<attempts>:<workflow ID>`, in $9; none: NULL, another run's row). No join of the outcomes: a join
 * planned once for every batch size drove a nested loop over the executor's running rows that scanned every outcome
 * for each (a millisecond per batch of 64); on Citus, no `unnest` keeps the statement on the fast path.
 */
function outcomeFieldSql(field: keyof typeof OUTCOME_ARRAYS): string {
  return `(${OUTCOME_ARRAYS[field]})[array_position($9::text[], ${RUN_OF_ROW_SQL})]`;
}

/**
 * The active rows `w` of the outcomes in `$1`, still PENDING under this executor ($6): of their queues ($10; on
 * Citus, of queue $11).
 */
function outcomeRowsByIdSql(citus: boolean): string {
  return `w.queue_name = ${citus ? '$11' : 'ANY($10::text[])'} AND w.workflow_id = ANY($1::text[])
  AND w.status = ${STATUS_SQL.PENDING} AND w.executor_id = $6`;
}

/**
 * The parts of the one-server outcome statement that a batch needs (see `WorkflowOutcomeStore.outcomesSql`): each
 * part a batch does not need is left out, or its value written as a constant in place of its parameter array.
 */
interface OutcomeParts {
  /** Some outcome is a RETRY: the `retried` update and the forgetting of its failed steps. */
  retries: boolean;
  /** Some outcome is PARKED: the `parked` update. */
  parks: boolean;
  /** Some outcome is not a SUCCESS: the statuses are read from their array (else every ending row is a SUCCESS). */
  failures: boolean;
  /** Some outcome has a return value: the outputs are read from their array (else NULL). */
  outputs: boolean;
  /** Some outcome has an error: the errors are read from their array (else NULL). */
  errors: boolean;
  /** Some queue's workers are to be woken (`wakeQueues`): the `woken` notifications. */
  wakes: boolean;
}

/** Every part: the statement for any batch (the form the Citus statements are described by). */
const ALL_OUTCOME_PARTS: OutcomeParts = {
  retries: true,
  parks: true,
  failures: true,
  outputs: true,
  errors: true,
  wakes: true,
};

function outcomeParts(outcomes: WorkflowOutcome[], wakeQueues: string[]): OutcomeParts {
  return {
    retries: outcomes.some((o) => o.status === 'RETRY'),
    parks: outcomes.some((o) => o.status === 'PARKED'),
    failures: outcomes.some((o) => o.status !== 'SUCCESS'),
    outputs: outcomes.some((o) => o.outputJson !== null),
    errors: outcomes.some((o) => o.error !== null),
    wakes: wakeQueues.length > 0,
  };
}

export interface WorkflowOutcome {
  workflowId: string;
  queueName: string;
  /** The claim count of the run that produced it: only that run's outcome is recorded. */
  attempt: number;
  /**
   * RETRY: the attempt failed and the workflow waits ENQUEUED, keeping its key, until `retryAt`. PARKED: the run met
   * a recorded position with a different operation (`WorkflowDeterminismError`): it is dead-lettered with that
   * error, keeping its key, its steps and its children, until `resume`.
   */
  status: 'SUCCESS' | 'ERROR' | 'RETRY' | 'PARKED';
  /** The return value as JSON text; null when the workflow returned undefined or failed. */
  outputJson: string | null;
  error: WorkflowErrorInfo | null;
  /** For RETRY: how long to wait, by the database's clock. */
  retryDelayMs?: number;
}

/** What `recordOutcomes` did. */
export interface OutcomesRecorded {
  /** The workflows whose outcome was recorded. */
  recorded: string[];
  /** The rows of the attached claim, as JSON text. */
  claimedJson: string[];
  /** Those of `recorded` that ended and had been sent messages (some may be left unreceived). */
  sentMessages: string[];
}

/**
 * The SQL of what a worker does to the runs it claimed (`WorkflowClaimer` claims): recording their outcomes, storing
 * a run's own options, and giving back the runs it never started. An outcome ends workflows through `endWorkflowsSql`
 * in one statement (on Citus, router statements in one transaction per queue). Locks: none beyond the rows a
 * statement updates; an outcome changes only a row still PENDING under its executor in the same run (no lock is
 * taken to check that: the UPDATE's condition decides; on Citus, the rows that end are locked first).
 */
export class WorkflowOutcomeStore {
  private readonly tables: WorkflowTables;
  private readonly table: string;
  private readonly steps: string;

  constructor(private readonly database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
    this.table = this.tables.active;
    this.steps = this.tables.steps;
  }

  /**
   * Records finished workflows and frees their deduplication IDs in the same statement; a RETRY goes back to
   * ENQUEUED for its `retryDelayMs`, keeping its key, and forgets the checkpoints from its first failed step on (so
   * that step runs again). Only rows still PENDING under this executor change: a workflow cancelled, timed out or
   * recovered meanwhile keeps its recorded state, and so does a later run of it (the attempt must match). Wakes the
   * workers of `wakeQueues` (queues with a global limit, whose freed slot another process may take). With `claim`,
   * claims in the same statement and commit (one round trip for a worker's finished and next workflows) and returns
   * the claimed rows as JSON text. On Citus, see `recordOutcomesByQueue`.
   */
  async recordOutcomes(
    executorId: string,
    outcomes: WorkflowOutcome[],
    wakeQueues: string[],
    claim?: AttachedClaim,
  ): Promise<OutcomesRecorded> {
    if (this.database.citus) return this.recordOutcomesByQueue(executorId, outcomes, wakeQueues, claim);
    const rows = await this.database.query<{
      workflow_id: string | null;
      claimed: string | null;
      sent_messages: boolean | null;
    }>(
      ...usedParameters(
        this.outcomesSql(outcomeParts(outcomes, wakeQueues), claim),
        this.outcomeParams(executorId, outcomes, wakeQueues).concat(claim?.params ?? []),
      ),
      // NOTE: an attached claim is not idempotent: a lost answer is the caller's to reconcile, not to resend.
      { prepared: true, idempotent: !claim },
    );
    const recorded: string[] = [];
    const claimedJson: string[] = [];
    const sentMessages: string[] = [];
    for (const row of rows) {
      if (row.claimed !== null) claimedJson.push(row.claimed);
      else if (row.workflow_id !== null) recorded.push(row.workflow_id);
      if (row.sent_messages && row.workflow_id !== null) sentMessages.push(row.workflow_id);
    }
    return { recorded, claimedJson, sentMessages };
  }

  /**
   * The one-server outcome statement of a batch that needs `parts` (see `outcomeParts`), with the attached claim's
   * CTEs: the parts a batch does not need are left out, so that each variant is a smaller statement that the server
   * plans once and keeps (its text is stable). Its parameters are numbered as `outcomeParams` gives them, then the
   * claim's; the caller renumbers them (`usedParameters`), since a variant reads only some (an unread parameter has no
   * type the server can tell).
   */
  private outcomesSql(parts: OutcomeParts, claim?: AttachedClaim): string {
    const { retries, parks, wakes } = parts;
    const updated = [retries && 'retried', parks && 'parked'].filter(Boolean) as string[];
    const retriedReady = `retried_ready AS (${insertReadyRowsSql(this.tables.ready, 'retried', true)}),`;
    return `WITH ${retries ? `retried AS (${this.retriedSql(false)}), ${retriedReady}` : ''}${parks ? ` parked AS (${this.parkedSql(false)}),` : ''}
       ${endWorkflowsSql(this.outcomesEndSpec(false, parts))},
       finished AS (
         SELECT workflow_id, queue_name, end_status AS outcome, messages_sent > 0 AS sent_messages FROM ended
         ${updated.map((cte) => `UNION ALL SELECT workflow_id, queue_name, outcome, false FROM ${cte}`).join('\n')}
       )${retries ? `, forgotten AS (${this.forgetFailedStepsSql('retried AS f', 'f.queue_name')})` : ''}${
         wakes
           ? `, woken AS (
         SELECT pg_notify($7, queue_name)::text FROM (SELECT DISTINCT queue_name FROM finished) AS q
         WHERE queue_name = ANY($8::text[])
       )`
           : ''
       }
       ${claim ? `, ${claim.ctes(11)}` : ''}
       SELECT workflow_id, NULL::text AS claimed, ${wakes ? '(SELECT count(*) FROM woken)' : 'NULL::bigint'} AS woken,
              ${ENDED_WAKE_UPS_SQL} AS handed_over, sent_messages
       FROM finished
       ${claim ? 'UNION ALL SELECT NULL, row_to_json(c)::text, NULL, NULL, NULL FROM claimed AS c' : ''}`;
  }

  /**
   * On Citus, `recordOutcomes` as router statements, one transaction per queue (the attached claim with the first
   * queue's): the retries (and their forgotten steps), the parks, the workflows that end (`endOutcomesOnCitus`, their
   * freed keys handed over), the claim, and the wake-up from the coordinator.
   */
  private async recordOutcomesByQueue(
    executorId: string,
    outcomes: WorkflowOutcome[],
    wakeQueues: string[],
    claim?: AttachedClaim,
  ): Promise<OutcomesRecorded> {
    const byQueue = new Map<string, WorkflowOutcome[]>();
    for (const o of outcomes) byQueue.set(o.queueName, [...(byQueue.get(o.queueName) ?? []), o]);
    const result: OutcomesRecorded = { recorded: [], claimedJson: [], sentMessages: [] };
    for (const [queue, batch] of byQueue) {
      const params = [...this.outcomeParams(executorId, batch, wakeQueues), queue];
      const attached = queue === outcomes[0].queueName ? claim : undefined;
      await this.database.transaction(async (query) => {
        const retried = batch.some((o) => o.status === 'RETRY')
          ? await query<ReadyRow>(...usedParameters(this.retriedSql(true), params))
          : [];
        await insertReadyRowsOnCitus(query, this.tables.ready, retried);
        if (retried.length > 0) await this.forgetFailedStepsOnCitus(query, queue, retried);
        const parked = batch.some((o) => o.status === 'PARKED')
          ? await query<{ workflow_id: string }>(...usedParameters(this.parkedSql(true), params))
          : [];
        const ending = batch.filter(
          (o): o is WorkflowOutcome & EndingOutcome => o.status !== 'RETRY' && o.status !== 'PARKED',
        );
        const ended = await endOutcomesOnCitus(query, this.outcomesEndSpec(true), params, queue, executorId, ending);
        const claimed = attached ? await attached.runInTransaction(query) : [];
        if (ended.length + retried.length + parked.length > 0 && wakeQueues.includes(queue)) {
          await query(NOTIFY_SQL, [this.database.wakeUpChannel, [queue]]);
        }
        result.recorded.push(...[...ended, ...retried, ...parked].map((row) => row.workflow_id));
        result.claimedJson.push(...claimed);
        result.sentMessages.push(...ended.filter((row) => row.sent_messages).map((row) => row.workflow_id));
      });
    }
    return result;
  }

  /**
   * The parameters of the outcome statements: $1 IDs, $2 statuses, $3 outputs, $4 errors, $5 retry delays,
   * $6 executor, $7 wake-up channel, $8 queues to wake, $9 the runs as `<attempt>:<workflow ID>` (`runOf`),
   * $10 their queues, each once (on Citus, $11: the queue).
   */
  private outcomeParams(executorId: string, outcomes: WorkflowOutcome[], wakeQueues: string[]): unknown[] {
    return [
      arrayParameter(outcomes, (o) => o.workflowId),
      arrayParameter(outcomes, (o) => o.status),
      arrayParameter(outcomes, (o) => o.outputJson),
      arrayParameter(outcomes, (o) => (o.error ? JSON.stringify(o.error) : null)),
      arrayParameter(outcomes, (o) => o.retryDelayMs),
      executorId,
      this.database.wakeUpChannel,
      wakeQueues,
      arrayParameter(outcomes, runOf),
      [...new Set(outcomes.map((o) => o.queueName))],
    ];
  }

  /** The RETRY outcomes: their rows go back to ENQUEUED until their retry delay is over, keeping their key. */
  private retriedSql(citus: boolean): string {
    const o = (field: keyof typeof OUTCOME_ARRAYS) => outcomeFieldSql(field);
    return `
         UPDATE ${this.table} AS w
         SET status = ${STATUS_SQL.ENQUEUED}, executor_id = NULL, updated_at = now(),
             not_before = ${nowPlusMsSql(citus, o('retry_delay_ms'))},
             failed_attempts = w.failed_attempts + 1, output = ${o('output')}::json, error = ${o('error')}::json
         ${this.outcomeRowsSql(citus, 'RETRY')}
       `;
  }

  /** The WHERE of an UPDATE of the rows whose outcome is `status`, and its RETURNING (see `outcomeFieldSql`). */
  private outcomeRowsSql(citus: boolean, status: 'RETRY' | 'PARKED'): string {
    const outcome = outcomeFieldSql('status');
    return `WHERE ${outcome} = '${status}' AND ${outcomeRowsByIdSql(citus)}
         RETURNING ${READY_ROW_COLUMNS.replace(/(\w+)/g, 'w.$1')}, ${outcome} AS outcome`;
  }

  /**
   * The PARKED outcomes: their rows are dead-lettered in place with the determinism error, keeping their key (a
   * dead letter that holds its key, which `resume` continues and `cancel` ends), their steps and their children.
   */
  private parkedSql(citus: boolean): string {
    return `
         UPDATE ${this.table} AS w
         SET status = ${STATUS_SQL.MAX_RECOVERY_ATTEMPTS_EXCEEDED}, executor_id = NULL, updated_at = now(),
             completed_at = now(), error = ${outcomeFieldSql('error')}::json
         ${this.outcomeRowsSql(citus, 'PARKED')}
       `;
  }

  /**
   * The other outcomes: their workflows end (see `endWorkflowsSql`; on Citus, `endOutcomesOnCitus`). A row of another
   * run has no outcome (`outcomeFieldSql`) and stays. Of `parts`, what the batch does not need is a constant: its
   * statuses when all are SUCCESS, its outputs or errors when all are null.
   */
  private outcomesEndSpec(citus: boolean, parts: OutcomeParts = ALL_OUTCOME_PARTS): EndSpec {
    const queueParam = citus ? '$11' : undefined;
    const status = parts.failures ? outcomeFieldSql('status') : `${STATUS_SQL.SUCCESS}::text`;
    const ends =
      parts.retries || parts.parks
        ? `${outcomeFieldSql('status')} NOT IN ('RETRY', 'PARKED')`
        : `array_position($9::text[], ${RUN_OF_ROW_SQL}) IS NOT NULL`;
    return {
      tables: this.tables,
      where: `${ends} AND ${outcomeRowsByIdSql(citus)}`,
      status,
      output: parts.outputs ? `${outcomeFieldSql('output')}::json` : 'NULL::json',
      error: parts.errors ? `${outcomeFieldSql('error')}::json` : 'NULL::json',
      keepsKeyWhen: keepsKeyInWindowSql(this.table, status, queueParam),
      overrides: { failed_attempts: `e.failed_attempts + (e.end_status <> ${STATUS_SQL.SUCCESS})::int` },
      channelParam: '$7',
      citus,
      queueParam,
      onlyRunning: true,
    };
  }

  /** Deletes the checkpoints of the workflows `retried` (FROM items with `f.workflow_id`) from their first failed step on. */
  private forgetFailedStepsSql(retried: string, queue: string): string {
    return `
         DELETE FROM ${this.steps} AS s
         USING ${retried}
         WHERE s.queue_name = ${queue} AND s.workflow_id = f.workflow_id
           AND s.step_index >= (SELECT min(step_index) FROM ${this.steps}
                                WHERE queue_name = ${queue} AND workflow_id = f.workflow_id
                                  AND error IS NOT NULL)
       `;
  }

  /**
   * On Citus, `forgetFailedStepsSql` as statements on Citus's fast path: the first failed step of each `retried`
   * workflow of `queue`, then the checkpoints of those that have one from there on.
   */
  private async forgetFailedStepsOnCitus(query: Query, queue: string, retried: Array<{ workflow_id: string }>) {
    const failed = await query<{ workflow_id: string; first_failed: number }>(
      `SELECT workflow_id, min(step_index)::int AS first_failed FROM ${this.steps}
       WHERE queue_name = $1 AND workflow_id = ANY($2::text[]) AND error IS NOT NULL
       GROUP BY workflow_id`,
      [queue, retried.map((row) => row.workflow_id)],
    );
    if (failed.length === 0) return;
    await query(
      `DELETE FROM ${this.steps}
       WHERE queue_name = $1 AND workflow_id = ANY($2::text[])
         AND step_index >= ($3::int[])[array_position($2::text[], workflow_id)]`,
      [queue, failed.map((row) => row.workflow_id), failed.map((row) => row.first_failed)],
    );
  }

  /**
   * Stores the retry and dead-letter limits that the process running a workflow applies (its own `@Workflow()`
   * options), so that recovery, which any process may do, dead-letters by them and the dashboard shows them. Only
   * while that run (`attempt`) still owns the workflow.
   */
  async recordRunOptions(
    queueName: string,
    workflowId: string,
    attempt: number,
    options: { maxAttempts: number; maxRecoveryAttempts: number },
  ): Promise<void> {
    await this.database.query(
      `UPDATE ${this.table} SET max_attempts = $3, max_recovery_attempts = $4, updated_at = now()
       WHERE queue_name = $5 AND workflow_id = $1 AND attempts = $2 AND status = ${STATUS_SQL.PENDING}`,
      [workflowId, attempt, options.maxAttempts, options.maxRecoveryAttempts, queueName],
      { idempotent: true },
    );
  }

  /**
   * Puts back in their queue workflows this executor claimed but never started (a worker's local buffer), as if
   * unclaimed: ENQUEUED, no executor, their claim count back by one; the queue's workers everywhere are woken.
   * Only the given runs that are still PENDING under it change.
   */
  async giveBack(
    executorId: string,
    queueName: string,
    runs: { workflowId: string; attempt: number }[],
  ): Promise<void> {
    if (this.database.citus) return this.giveBackOnCitus(executorId, queueName, runs);
    await this.database.query(
      `WITH returned AS (
         UPDATE ${this.table} AS w
         SET status = ${STATUS_SQL.ENQUEUED}, executor_id = NULL, attempts = w.attempts - 1, updated_at = now()
         FROM unnest($2::text[], $3::int[]) AS r(workflow_id, attempt)
         WHERE w.queue_name = $5 AND w.workflow_id = r.workflow_id AND w.attempts = r.attempt
           AND w.status = ${STATUS_SQL.PENDING} AND w.executor_id = $1
         RETURNING ${READY_ROW_COLUMNS.replace(/(\w+)/g, 'w.$1')}
       ),
       ready AS (${insertReadyRowsSql(this.tables.ready, 'returned', true)})
       SELECT pg_notify($4, queue_name)::text FROM (SELECT DISTINCT queue_name FROM returned) AS q`,
      [
        executorId,
        runs.map((run) => run.workflowId),
        runs.map((run) => run.attempt),
        this.database.wakeUpChannel,
        queueName,
      ],
      { idempotent: true },
    );
  }

  /**
   * On Citus, `giveBack` as an UPDATE that Citus plans on its fast path (each row found by its run in the parameter
   * arrays, no join with `unnest`), then the queue's wake-up from the coordinator (a `pg_notify` in the UPDATE's
   * statement would run on the queue's node, where no one listens), only when a row was given back.
   */
  private async giveBackOnCitus(
    executorId: string,
    queueName: string,
    runs: { workflowId: string; attempt: number }[],
  ): Promise<void> {
    const returned = await this.database.transaction(async (query) => {
      const rows = await query<ReadyRow>(
        `UPDATE ${this.table} AS w
         SET status = ${STATUS_SQL.ENQUEUED}, executor_id = NULL, attempts = w.attempts - 1, updated_at = now()
         WHERE w.queue_name = $1 AND w.workflow_id = ANY($2::text[]) AND w.status = ${STATUS_SQL.PENDING}
           AND w.executor_id = $3 AND ${RUN_OF_ROW_SQL} = ANY($4::text[])
         RETURNING ${READY_ROW_COLUMNS}`,
        [queueName, runs.map((run) => run.workflowId), executorId, runs.map(runOf)],
      );
      await insertReadyRowsOnCitus(query, this.tables.ready, rows);
      return rows;
    });
    await sendWakeUpsLeftToCaller(this.database, returned.length > 0 ? [queueName] : []);
  }
}
