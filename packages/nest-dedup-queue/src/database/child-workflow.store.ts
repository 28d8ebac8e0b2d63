import type { QueueDatabase } from './queue-database';
import { STATUS_SQL } from './workflow-status.sql';
import { workflowTables } from './workflow-tables';

/** The SQL of child workflows: a parent's own key, and the unfinished children a workflow enqueued in a queue. */
export class ChildWorkflowStore {
  private readonly active: string;

  constructor(private readonly database: QueueDatabase) {
    this.active = workflowTables(database.schemaSql).active;
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

  /** The ENQUEUED (or DELAYED) and PENDING workflows of `queueName` that `parentWorkflowId`'s body enqueued. */
  async unfinishedChildren(queueName: string, parentWorkflowId: string): Promise<string[]> {
    const rows = await this.database.query<{ workflow_id: string }>(
      `SELECT workflow_id FROM ${this.active}
       WHERE queue_name = $1 AND parent_workflow_id = $2 AND status IN (${STATUS_SQL.ENQUEUED}, ${STATUS_SQL.PENDING})`,
      [queueName, parentWorkflowId],
      { idempotent: true },
    );
    return rows.map((row) => row.workflow_id);
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
