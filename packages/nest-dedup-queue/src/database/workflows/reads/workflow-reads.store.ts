import type { ListWorkflowsOptions } from '../../../interfaces/list-workflows-options.interface';
import type { WorkflowErrorInfo, WorkflowStatus } from '../../../interfaces/workflow-status.interface';
import type { QueueDatabase } from '../../connection/queue-database';
import { REPORTED_STATUS_SQL, WORKFLOW_ROW_COLUMNS, WorkflowRow } from '../workflow-row';
import { WorkflowList } from './workflow-list';
import { parkedSql } from '../../tables/workflow-status.sql';
import { WorkflowTables, workflowTables } from '../../tables/workflow-tables';

export interface StatusCount {
  queueName: string;
  status: WorkflowStatus;
  count: number;
}

export interface WorkflowResultRow {
  status: WorkflowStatus;
  output: string | null;
  error: WorkflowErrorInfo | null;
  /** A dead letter parked by a code change, keeping its key: it goes on once resumed (see `parkedSql`). */
  parked: boolean;
}

/**
 * The reads of workflows, active or finished (the `workflows` view of both tables): a workflow's queue, row and
 * result by its ID, lists and counts per status.
 */
export class WorkflowReadStore {
  private readonly tables: WorkflowTables;
  private readonly listed: WorkflowList;

  constructor(private readonly database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
    this.listed = new WorkflowList(database);
  }

  /** The queue of a workflow, by its ID alone (on Citus a probe of every node); undefined when it does not exist. */
  async findQueue(workflowId: string): Promise<string | undefined> {
    const rows = await this.database.query<{ queue_name: string }>(
      `SELECT queue_name FROM ${this.tables.workflows} WHERE workflow_id = $1 LIMIT 1`,
      [workflowId],
      { idempotent: true },
    );
    return rows[0]?.queue_name;
  }

  /** A workflow's row; `queueName`, when known, is named in the look-up (on Citus: one node instead of every node). */
  async findRow(workflowId: string, queueName?: string): Promise<WorkflowRow | undefined> {
    const rows = await this.database.query<WorkflowRow>(
      `SELECT ${WORKFLOW_ROW_COLUMNS} FROM ${this.tables.workflows}
       WHERE workflow_id = $1 ${queueName === undefined ? '' : 'AND queue_name = $2'} LIMIT 1`,
      queueName === undefined ? [workflowId] : [workflowId, queueName],
      { prepared: true, idempotent: true },
    );
    return rows[0];
  }

  /** A workflow's status, output and error, and whether it is parked (`queueName` as in `findRow`). */
  async findResult(workflowId: string, queueName?: string): Promise<WorkflowResultRow | undefined> {
    const rows = await this.database.query<WorkflowResultRow>(
      `SELECT status, output::text AS output, error, ${parkedSql()} AS parked FROM ${this.tables.workflows}
       WHERE workflow_id = $1 ${queueName === undefined ? '' : 'AND queue_name = $2'} LIMIT 1`,
      queueName === undefined ? [workflowId] : [workflowId, queueName],
      { prepared: true, idempotent: true },
    );
    return rows[0];
  }

  /** See `WorkflowList`: newest first by creation time, the history read in windows of it. */
  async list(filter: ListWorkflowsOptions): Promise<WorkflowRow[]> {
    return this.listed.read(filter);
  }

  /** How many workflows each queue has per status, as reported (`DELAYED` apart from `ENQUEUED`). */
  async countByStatus(queueName?: string): Promise<StatusCount[]> {
    const rows = await this.database.query<{ queue_name: string; status: WorkflowStatus; count: number }>(
      `SELECT queue_name, ${REPORTED_STATUS_SQL} AS status, count(*)::int AS count FROM ${this.tables.workflows}
       WHERE $1::text IS NULL OR queue_name = $1
       GROUP BY 1, 2`,
      [queueName ?? null],
    );
    return rows.map((row) => ({ queueName: row.queue_name, status: row.status, count: row.count }));
  }
}
