import { MAX_KEY_LENGTH } from '../../dedup-queue.constants';
import { exceedsCharacters } from '../../utils/character-length';

/**
 * Cancel notifications carry `<reason prefix><attempts>:<workflow ID>`, so that the process running the workflow
 * tells its body why, and leaves alone a later run of it (see `parseInterruptPayload`). They are hints only: any role
 * that can connect may NOTIFY, so the process confirms in the database before it aborts anything (`CancelHints`).
 */
export function interruptPayloadPrefix(reason: 'cancelled' | 'timed-out'): string {
  return reason === 'timed-out' ? 't:' : 'c:';
}

/**
 * The payload for the run `attempts` of `workflowId`. NOTE: a workflow ID longer than `MAX_KEY_LENGTH` (a row written
 * through SQL before the function checked lengths) would overflow a payload (under 8000 bytes) and fail the whole
 * statement: it goes out as the prefix alone, which has each process check all its runs.
 */
export function interruptPayload(reason: 'cancelled' | 'timed-out', attempts: number, workflowId: string): string {
  const prefix = interruptPayloadPrefix(reason);
  return exceedsCharacters(workflowId, MAX_KEY_LENGTH) ? prefix : `${prefix}${attempts}:${workflowId}`;
}

/** `interruptPayload` in SQL: the prefix parameter `prefixParam`, and the `attempts` and `workflow_id` of the row. */
export function interruptPayloadSql(prefixParam: string): string {
  return `${prefixParam}::text || CASE WHEN char_length(workflow_id) <= ${MAX_KEY_LENGTH}
           THEN attempts || ':' || workflow_id ELSE '' END`;
}

/** What a cancel notification's payload says. */
export interface InterruptPayload {
  workflowId: string;
  reason: 'cancelled' | 'timed-out';
  /** The claim count of the workflow when it was cancelled: the run that the cancel ended. */
  attempt?: number;
}

/** Reads a cancel notification's payload (`interruptPayload`). */
export function parseInterruptPayload(payload: string): InterruptPayload {
  const reason = payload.startsWith('t:') ? 'timed-out' : 'cancelled';
  const numbered = /^[ct]:(\d+):/.exec(payload);
  return numbered
    ? { workflowId: payload.slice(numbered[0].length), reason, attempt: Number(numbered[1]) }
    : { workflowId: payload.slice(2), reason };
}
