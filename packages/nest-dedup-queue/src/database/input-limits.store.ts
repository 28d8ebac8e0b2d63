import type { QueueDatabase } from './connection/queue-database';

/**
 * Writes this process's `inputLimits` to `<schema>.input_limits` (migration 019), where `<schema>.enqueue_workflow`
 * reads them, when they differ from what is there: the SQL function applies the limits of the process that booted
 * last, so every process should be given the same.
 */
export async function storeInputLimits(database: QueueDatabase): Promise<void> {
  const { maxValueBytes, maxDepth } = database.inputLimits;
  await database.query(
    `UPDATE ${database.schemaSql}.input_limits
     SET max_value_bytes = $1, max_depth = $2
     WHERE (max_value_bytes, max_depth) IS DISTINCT FROM ($1::integer, $2::integer)`,
    [maxValueBytes, maxDepth],
    { idempotent: true },
  );
}
