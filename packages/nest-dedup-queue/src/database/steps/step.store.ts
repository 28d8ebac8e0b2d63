import type { EntityManager } from 'typeorm';
import type { WorkflowErrorInfo } from '../../interfaces/workflow-status.interface';
import type { QueueDatabase } from '../connection/queue-database';
import { startTimeSql } from '../connection/time.sql';
import { workflowTables } from '../tables/workflow-tables';
import { checkpointFunctionName } from './checkpoint-function.sql';
import { STEP_COLUMNS } from './step-columns';
import { RunRefs, ownedRowSql } from './owned-row.sql';

/** A step outcome as checkpointed. */
export interface RecordedStep {
  name: string;
  /** JSON text; null when the step returned undefined or failed. */
  output: string | null;
  error: WorkflowErrorInfo | null;
}

export interface StepCheckpoint {
  workflowId: string;
  queueName: string;
  index: number;
  name: string;
  outputJson: string | null;
  error: WorkflowErrorInfo | null;
  /** How long the step took, from its first attempt's start (measured in this process). */
  durationMs: number;
}

/**
 * The checkpoint's columns after the key: its outcome and its times, by the database's clock (on Citus, the
 * statement's `now()`, as `startTimeSql` says).
 */
function checkpointValuesSql(citus: boolean): string {
  const time = startTimeSql(citus);
  return `$4::json, $5::json, ${time} - $6::float8 * interval '1 millisecond', ${time}`;
}

/** The run's parameters in the statements that read its owned row alone: $1 workflow, $2 executor, $3 run, $4 queue. */
const RUN_PARAMS: RunRefs = { workflow: '$1', executor: '$2', attempt: '$3', queue: '$4' };

/**
 * The active row a step's transaction locked (`StepStore.lockIfOwned`): its creation time as text (to the
 * microsecond), which the checkpoint records.
 */
export interface OwnedRow {
  created_at: string;
}

/** The SQL of durable steps: load a workflow's checkpoints, and record one while the workflow is still owned. */
export class StepStore {
  private readonly steps: string;
  private readonly workflows: string;
  /** The checkpoint ($1 to $6) of workflow $1 inserted if it is owned by executor $7 in run $8 of queue $9. */
  private readonly insertSql: string;
  /** The owned row (`RUN_PARAMS`) locked `FOR SHARE`, as an `OwnedRow`. */
  private readonly lockOwnedSql: string;
  /** The checkpoint ($1 to $6) of queue $7 with its workflow's creation time ($8) inserted by `VALUES`. */
  private readonly insertValuesSql: string;
  /** On Citus, the checkpoint as one call of `record_checkpoint` (`checkpoint-function.sql.ts`), sent whole to the queue's node. */
  private readonly recordOnCitusSql: string;

  constructor(
    /** The database the checkpoints are written to (a running workflow's events go there too). */
    readonly database: QueueDatabase,
    /** How long a step's transaction may sit idle (its process stalled) before Postgres ends it. */
    private readonly idleTransactionTimeoutMs: number,
  ) {
    const tables = workflowTables(database.schemaSql);
    this.steps = tables.steps;
    this.workflows = tables.active;
    this.insertSql = `INSERT INTO ${this.steps} (${STEP_COLUMNS})
       SELECT $1, $2, $3, ${checkpointValuesSql(database.citus)}, owned.queue_name, owned.created_at
       FROM (${ownedRowSql(this.workflows, { workflow: '$1', executor: '$7', attempt: '$8', queue: '$9' })}) AS owned`;
    this.lockOwnedSql = `${ownedRowSql(this.workflows, RUN_PARAMS, 'created_at::text AS created_at')} FOR SHARE`;
    this.insertValuesSql = `INSERT INTO ${this.steps} (${STEP_COLUMNS})
       VALUES ($1, $2, $3, ${checkpointValuesSql(database.citus)}, $7, $8::timestamptz)`;
    this.recordOnCitusSql = `SELECT ${checkpointFunctionName(database.schemaSql)}($1, $2, $3, $4, $5, $6, $7::json, $8::json, $9) AS recorded`;
  }

  /** The checkpoints of workflow `workflowId` of queue `queueName`, by step index. */
  async load(queueName: string, workflowId: string): Promise<Map<number, RecordedStep>> {
    const rows = await this.database.query<{
      step_index: number;
      step_name: string;
      output: string | null;
      error: WorkflowErrorInfo | null;
    }>(
      `SELECT step_index, step_name, output::text AS output, error FROM ${this.steps}
       WHERE queue_name = $2 AND workflow_id = $1`,
      [workflowId, queueName],
      { idempotent: true },
    );
    return new Map(rows.map((row) => [row.step_index, { name: row.step_name, output: row.output, error: row.error }]));
  }

  /** The checkpoint of workflow `workflowId` of queue `queueName` at step `index`, if there is one. */
  async find(queueName: string, workflowId: string, index: number): Promise<RecordedStep | undefined> {
    const rows = await this.database.query<{
      step_name: string;
      output: string | null;
      error: WorkflowErrorInfo | null;
    }>(
      `SELECT step_name, output::text AS output, error FROM ${this.steps}
       WHERE queue_name = $2 AND workflow_id = $1 AND step_index = $3`,
      [workflowId, queueName, index],
      { idempotent: true },
    );
    return rows[0] && { name: rows[0].step_name, output: rows[0].output, error: rows[0].error };
  }

  /**
   * Records a checkpoint if the workflow is still PENDING under this executor in the run numbered `attempt` (not a
   * later run of it, after a cancel and resume); false if it is not. Idempotent: a checkpoint already recorded at
   * this index (an earlier send whose answer was lost) counts as recorded. NOTE: one `INSERT … SELECT` from the
   * owned row; only when it inserts nothing does a second statement tell an existing checkpoint from a workflow no
   * longer owned. On Citus, one call of the distributed function `record_checkpoint`, which Citus sends whole to the
   * queue's node: the owned row locked `FOR SHARE` and the checkpoint inserted there, in one transaction.
   */
  async record(step: StepCheckpoint, executorId: string, attempt: number): Promise<boolean> {
    if (this.database.citus) {
      const [{ recorded }] = await this.database.query<{ recorded: boolean }>(
        this.recordOnCitusSql,
        [
          step.queueName,
          step.workflowId,
          executorId,
          attempt,
          step.index,
          step.name,
          step.outputJson,
          step.error ? JSON.stringify(step.error) : null,
          step.durationMs,
        ],
        { prepared: true, idempotent: true },
      );
      return recorded;
    }
    const params = [...this.values(step), executorId, attempt, step.queueName];
    const inserted = await this.database.query(
      `${this.insertSql} ON CONFLICT DO NOTHING RETURNING step_index`,
      params,
      {
        idempotent: true,
      },
    );
    if (inserted.length > 0) return true;
    const owned = await this.database.query(
      ownedRowSql(this.workflows, RUN_PARAMS),
      [step.workflowId, executorId, attempt, step.queueName],
      { idempotent: true },
    );
    return owned.length > 0;
  }

  /**
   * Runs `work` in a transaction on the module's DataSource. NOTE: if this process stalls inside it for longer than
   * the lease, Postgres ends the session, releasing the workflow row so that another executor can recover it.
   */
  async transaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    return this.database.managerTransaction(async (manager) => {
      await manager.query(
        `SET LOCAL idle_in_transaction_session_timeout = ${Math.round(this.idleTransactionTimeoutMs)}`,
      );
      return work(manager);
    });
  }

  /**
   * Inside a step's transaction: locks the workflow row against status changes until commit, if this executor
   * still owns it in the run numbered `attempt`; returns the row (undefined if not owned), for `insert`. NOTE: FOR
   * SHARE makes a concurrent cancel or recovery wait for the step's commit, so the step's writes never land after
   * its workflow was taken away. On Citus, a statement on Citus's fast path.
   */
  async lockIfOwned(
    manager: EntityManager,
    queueName: string,
    workflowId: string,
    executorId: string,
    attempt: number,
  ): Promise<OwnedRow | undefined> {
    const rows: OwnedRow[] = await manager.query(this.lockOwnedSql, [workflowId, executorId, attempt, queueName]);
    return rows[0];
  }

  /**
   * Inside a step's transaction, with its workflow's row locked (`owned`, from `lockIfOwned`): records the
   * checkpoint by `VALUES`, with the row's creation time (on Citus a router insert: an `INSERT … SELECT` from the
   * owned row would go through Citus's full planner, and lock nothing more).
   */
  async insert(manager: EntityManager, owned: OwnedRow, step: StepCheckpoint): Promise<void> {
    await manager.query(this.insertValuesSql, [...this.values(step), step.queueName, owned.created_at]);
  }

  private values(step: StepCheckpoint): unknown[] {
    return [
      step.workflowId,
      step.index,
      step.name,
      step.outputJson,
      step.error ? JSON.stringify(step.error) : null,
      step.durationMs,
    ];
  }
}
