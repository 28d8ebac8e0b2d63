import type { ListWorkflowsOptions } from '../interfaces/list-workflows-options.interface';
import type { WorkflowErrorInfo, WorkflowStatus } from '../interfaces/workflow-status.interface';
import type { QueueDatabase } from './queue-database';
import { isUniqueViolationOn } from './sql-errors';
import { WORKFLOW_ROW_COLUMNS, WorkflowRow } from './workflow-row';

/** The partial unique index that enforces "one active workflow per deduplication ID and queue". */
export const ACTIVE_DEDUPLICATION_INDEX = 'workflows_active_deduplication_id';

export interface NewWorkflow {
  workflowId: string;
  queueName: string;
  workflowName: string;
  deduplicationId: string | null;
  /** The arguments, already serialised to JSON text. */
  inputsJson: string;
}

export type InsertResult =
  | { outcome: 'inserted' }
  | { outcome: 'duplicate-workflow-id'; existing: { queueName: string; workflowName: string } }
  | { outcome: 'deduplicated' };

export interface ClaimedWorkflow {
  workflowId: string;
  workflowName: string;
  inputsJson: string;
}

export interface ClaimRequest {
  queueName: string;
  executorId: string;
  limit: number;
  workflowNames: string[];
  /** The queue's limit across all processes, if it has one. */
  globalConcurrency?: number;
}

export interface WorkflowOutcome {
  workflowId: string;
  status: Extract<WorkflowStatus, 'SUCCESS' | 'ERROR'>;
  /** The return value as JSON text; null when the workflow returned undefined or failed. */
  outputJson: string | null;
  error: WorkflowErrorInfo | null;
}

export interface WorkflowResultRow {
  status: WorkflowStatus;
  output: string | null;
  error: WorkflowErrorInfo | null;
}

/** The SQL of the workflow lifecycle: enqueue, claim, record outcome, cancel and look-ups. */
export class WorkflowStore {
  private readonly table: string;

  constructor(private readonly database: QueueDatabase) {
    this.table = `${database.schemaSql}.workflows`;
  }

  /**
   * Inserts a new ENQUEUED workflow and wakes the workers, in one statement. The partial unique index decides
   * duplicates: a unique violation on it means the deduplication ID is held. A reused workflow ID is not an
   * error: the existing row wins.
   */
  async insert(workflow: NewWorkflow): Promise<InsertResult> {
    try {
      const rows = await this.database.query(
        `WITH inserted AS (
           INSERT INTO ${this.table}
             (workflow_id, queue_name, workflow_name, status, deduplication_id, active_deduplication_id, inputs)
           VALUES ($1, $2, $3, 'ENQUEUED', $4, $4, $5::json)
           ON CONFLICT (workflow_id) DO NOTHING
           RETURNING queue_name
         )
         SELECT pg_notify($6, queue_name) FROM inserted`,
        [
          workflow.workflowId,
          workflow.queueName,
          workflow.workflowName,
          workflow.deduplicationId,
          workflow.inputsJson,
          this.database.wakeUpChannel,
        ],
      );
      if (rows.length === 1) {
        return { outcome: 'inserted' };
      }
    } catch (error) {
      if (isUniqueViolationOn(error, ACTIVE_DEDUPLICATION_INDEX)) {
        return { outcome: 'deduplicated' };
      }
      throw error;
    }
    const existing = await this.findRow(workflow.workflowId);
    if (!existing) {
      return this.insert(workflow);
    }
    return {
      outcome: 'duplicate-workflow-id',
      existing: { queueName: existing.queue_name, workflowName: existing.workflow_name },
    };
  }

  /** The workflow that currently holds a deduplication ID in a queue, if any. */
  async findHolder(queueName: string, deduplicationId: string): Promise<string | undefined> {
    const rows = await this.database.query<{ workflow_id: string }>(
      `SELECT workflow_id FROM ${this.table} WHERE queue_name = $1 AND active_deduplication_id = $2`,
      [queueName, deduplicationId],
    );
    return rows[0]?.workflow_id;
  }

  /**
   * Moves up to `limit` ENQUEUED workflows of a queue to PENDING under this executor, highest priority and oldest
   * first, skipping rows other workers are claiming. With a global limit, claimers of the queue take turns on a
   * transaction advisory lock so that the count of running workflows they read is exact.
   */
  async claim(request: ClaimRequest): Promise<ClaimedWorkflow[]> {
    const params: unknown[] = [request.queueName, request.executorId, request.workflowNames, request.limit];
    let limit = '$4';
    if (request.globalConcurrency !== undefined) {
      params.push(request.globalConcurrency);
      limit = `LEAST($4, GREATEST(0, $5 - (
          SELECT count(*) FROM ${this.table} WHERE queue_name = $1 AND status = 'PENDING')))`;
    }
    const sql = `
      UPDATE ${this.table} AS w
      SET status = 'PENDING', executor_id = $2, attempts = w.attempts + 1, started_at = now(), updated_at = now()
      FROM (
        SELECT workflow_id FROM ${this.table}
        WHERE queue_name = $1 AND status = 'ENQUEUED' AND workflow_name = ANY($3::text[])
        ORDER BY priority, seq
        LIMIT ${limit}
        FOR UPDATE SKIP LOCKED
      ) AS claimable
      WHERE w.workflow_id = claimable.workflow_id
      RETURNING w.workflow_id, w.workflow_name, w.inputs::text AS inputs, w.priority, w.seq`;
    type Claimed = { workflow_id: string; workflow_name: string; inputs: string; priority: number; seq: string };
    const rows =
      request.globalConcurrency === undefined
        ? await this.database.query<Claimed>(sql, params)
        : await this.database.transaction(async (query) => {
            await query('SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))', [this.table, request.queueName]);
            return query<Claimed>(sql, params);
          });
    return rows
      .sort((a, b) => a.priority - b.priority || Number(BigInt(a.seq) - BigInt(b.seq)))
      .map((row) => ({ workflowId: row.workflow_id, workflowName: row.workflow_name, inputsJson: row.inputs }));
  }

  /**
   * Records finished workflows and frees their deduplication IDs in the same statement. Only rows still PENDING
   * under this executor change: a workflow cancelled meanwhile keeps its recorded state. Wakes the workers of
   * `wakeQueues` (queues with a global limit, whose freed slot another process may take).
   */
  async recordOutcomes(executorId: string, outcomes: WorkflowOutcome[], wakeQueues: string[]): Promise<string[]> {
    const rows = await this.database.query<{ workflow_id: string }>(
      `WITH finished AS (
         UPDATE ${this.table} AS w
         SET status = o.status, output = o.output::json, error = o.error::json, active_deduplication_id = NULL,
             completed_at = now(), updated_at = now()
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS o(workflow_id, status, output, error)
         WHERE w.workflow_id = o.workflow_id AND w.status = 'PENDING' AND w.executor_id = $5
         RETURNING w.workflow_id, w.queue_name
       ), woken AS (
         SELECT pg_notify($6, queue_name) FROM (SELECT DISTINCT queue_name FROM finished) AS q
         WHERE queue_name = ANY($7::text[])
       )
       SELECT workflow_id, (SELECT count(*) FROM woken) AS woken FROM finished`,
      [
        outcomes.map((o) => o.workflowId),
        outcomes.map((o) => o.status),
        outcomes.map((o) => o.outputJson),
        outcomes.map((o) => (o.error ? JSON.stringify(o.error) : null)),
        executorId,
        this.database.wakeUpChannel,
        wakeQueues,
      ],
    );
    return rows.map((row) => row.workflow_id);
  }

  /**
   * Ends an ENQUEUED or PENDING workflow as CANCELLED and frees its deduplication ID. Returns the status the
   * workflow has afterwards, or undefined when it does not exist.
   */
  async cancel(workflowId: string): Promise<WorkflowStatus | undefined> {
    const cancelled = await this.database.query(
      `UPDATE ${this.table}
       SET status = 'CANCELLED', active_deduplication_id = NULL, completed_at = now(), updated_at = now()
       WHERE workflow_id = $1 AND status IN ('ENQUEUED', 'PENDING')
       RETURNING workflow_id`,
      [workflowId],
    );
    return cancelled.length === 1 ? 'CANCELLED' : (await this.findRow(workflowId))?.status;
  }

  async findRow(workflowId: string): Promise<WorkflowRow | undefined> {
    const rows = await this.database.query<WorkflowRow>(
      `SELECT ${WORKFLOW_ROW_COLUMNS} FROM ${this.table} WHERE workflow_id = $1`,
      [workflowId],
    );
    return rows[0];
  }

  async findResult(workflowId: string): Promise<WorkflowResultRow | undefined> {
    const rows = await this.database.query<WorkflowResultRow>(
      `SELECT status, output::text AS output, error FROM ${this.table} WHERE workflow_id = $1`,
      [workflowId],
    );
    return rows[0];
  }

  async list(filter: ListWorkflowsOptions): Promise<WorkflowRow[]> {
    const conditions: string[] = [];
    const params: unknown[] = [];
    const where = (column: string, value: unknown) => {
      params.push(value);
      conditions.push(`${column} = $${params.length}`);
    };
    if (filter.queueName !== undefined) where('queue_name', filter.queueName);
    if (filter.workflowName !== undefined) where('workflow_name', filter.workflowName);
    if (filter.deduplicationId !== undefined) where('deduplication_id', filter.deduplicationId);
    if (filter.status !== undefined) {
      params.push(Array.isArray(filter.status) ? filter.status : [filter.status]);
      conditions.push(`status = ANY($${params.length}::text[])`);
    }
    params.push(filter.limit ?? 100, filter.offset ?? 0);
    return this.database.query<WorkflowRow>(
      `SELECT ${WORKFLOW_ROW_COLUMNS} FROM ${this.table}
       ${conditions.length ? `WHERE ${conditions.join(' AND ')}` : ''}
       ORDER BY seq DESC
       LIMIT $${params.length - 1} OFFSET $${params.length}`,
      params,
    );
  }
}
