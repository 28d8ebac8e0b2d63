import { DedupQueueError } from './dedup-queue.error';

/**
 * The database could not be reached, or the connection broke while a call was on it. `cause` holds the driver's
 * error. Whether the call took effect is unknown when the connection broke mid-statement: an enqueue is safe to
 * repeat with the same `workflowId` (idempotent). `DedupExceptionFilter` answers it with 503 and `Retry-After`.
 */
export class DatabaseUnavailableError extends DedupQueueError {
  constructor(
    message: string,
    /** The driver's error (pg's, or a socket error). */
    override readonly cause: unknown,
    /** A suggested wait before trying again, in seconds (sent as `Retry-After`). */
    readonly retryAfterSeconds = 5,
  ) {
    super(message);
  }
}
