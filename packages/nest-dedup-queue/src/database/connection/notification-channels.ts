/**
 * The LISTEN/NOTIFY channels of a schema, named once: the code and the SQL functions created by migrations build
 * them from these prefixes and the schema's name. NOTE: a trigger function has the wake-up channel compiled in;
 * changing a prefix needs a migration that creates the function again (see migration 011).
 */

/** Wakes workers when work is ready in a queue of the schema; the payload is the queue name. */
export const WAKE_UP_CHANNEL_PREFIX = 'dedup_queue:';
/** Tells every process a queue was paused, resumed or given new limits; the payload is its name. */
export const CONTROL_CHANNEL_PREFIX = 'dedup_queue_control:';
/** Tells workers to interrupt a workflow; the payload is described by `interruptPayloadPrefix`. */
export const CANCEL_CHANNEL_PREFIX = 'dedup_queue_cancel:';
/**
 * Tells the readers of a workflow's streams that one of them changed (a value, a close, the workflow's end); the
 * payload is the workflow's ID (see `streamHintPayload`). Only a hint: readers then read the table (any role may
 * NOTIFY on any channel).
 */
export const STREAM_CHANNEL_PREFIX = 'dedup_queue_stream:';

/** The longest workflow ID a stream hint carries; a longer one (written through SQL) is too long for a payload. */
const MAX_HINTED_ID_LENGTH = 255;

/** The payload of a stream hint: the workflow's ID, or empty for one too long (every reader then reads again). */
export function streamHintPayload(workflowId: string): string {
  return [...workflowId].length <= MAX_HINTED_ID_LENGTH ? workflowId : '';
}

/** `streamHintPayload` in SQL, of the text expression `id`. */
export function streamHintPayloadSql(id: string): string {
  return `CASE WHEN char_length(${id}) <= ${MAX_HINTED_ID_LENGTH} THEN ${id} ELSE '' END`;
}
