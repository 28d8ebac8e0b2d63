/** The columns of a checkpoint, as an INSERT lists them. */
export const STEP_COLUMNS =
  'workflow_id, step_index, step_name, output, error, started_at, completed_at, queue_name, workflow_created_at';
