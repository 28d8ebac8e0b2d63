import type { QueueDatabase } from '../../connection/queue-database';
import { ACTIVE_TABLE_WORKFLOW_STATUSES_SQL } from '../../tables/workflow-status.sql';
import { workflowTables } from '../../tables/workflow-tables';

/** The SQL of child workflows: a parent's own key, and the children a workflow enqueued in a queue. */
export class ChildWorkflowStore {
  private readonly active: string;
  private readonly workflows: string;

  constructor(private readonly database: QueueDatabase) {
    this.active = workflowTables(database.schemaSql).active;
    this.workflows = workflowTables(database.schemaSql).workflows;
  }

  /** The deduplication ID workflow `workflowId` of `queueName` holds now, if any. */
  async heldKey(queueName: string, workflowId: string): Promise<string | undefined> {
    const rows = await this.database.query<{ key: string | null }>(
      `SELECT active_deduplication_id AS key FROM ${this.active} WHERE queue_name = $1 AND workflow_id = $2`,
      [queueName, workflowId],
      { idempotent: true },
    );
    return rows[0]?.key ?? undefined;
  }

  /**
   * The workflows of `queueName` that the bodies of `parentWorkflowIds` enqueued, finished or not (a finished child's
   * own children may still run), and whether each is unfinished or dead-lettered (what a cancel of the tree ends).
   * Read through the view: the active table's and the history's indexes on the parent (migrations 015 and 020).
   */
  async children(
    queueName: string,
    parentWorkflowIds: string[],
  ): Promise<Array<{ workflowId: string; cancellable: boolean }>> {
    const rows = await this.database.query<{ workflow_id: string; cancellable: boolean }>(
      `SELECT workflow_id, status IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL} AS cancellable FROM ${this.workflows}
       WHERE queue_name = $1 AND parent_workflow_id = ANY($2::text[])`,
      [queueName, parentWorkflowIds],
      { idempotent: true },
    );
    return rows.map((row) => ({ workflowId: row.workflow_id, cancellable: row.cancellable }));
  }

  /** Every queue any process of the module declared (`<schema>.queues`), where children may live. */
  async queueNames(): Promise<string[]> {
    const rows = await this.database.query<{ queue_name: string }>(
      `SELECT queue_name FROM ${this.database.schemaSql}.queues ORDER BY queue_name`,
      [],
      { idempotent: true },
    );
    return rows.map((row) => row.queue_name);
  }
}
