/** Which workflow a statement changed. */
export interface WorkflowRef {
  workflowId: string;
  queueName: string;
  workflowName: string;
}

/** The columns of a `WorkflowRef`, as a statement returns them. */
export interface WorkflowRefRow {
  workflow_id: string;
  queue_name: string;
  workflow_name: string;
}

/** The `WorkflowRef` of a returned row. */
export function toWorkflowRef(row: WorkflowRefRow): WorkflowRef {
  return { workflowId: row.workflow_id, queueName: row.queue_name, workflowName: row.workflow_name };
}
