import { DedupQueueError } from './dedup-queue.error';

/** The server fields a refused statement carries (those of node-postgres's `DatabaseError`). */
interface ServerErrorFields {
  code?: string;
  constraint?: string;
  message?: string;
}

/**
 * Postgres refused a statement of the module for a reason other than a duplicate or an outage: a constraint or
 * trigger of the application's on the module's tables, a lock timeout, a value the server cannot store. Nothing
 * of that statement was written. `code` is the SQLSTATE; `cause` holds the driver's error. `DedupExceptionFilter`
 * answers it with 500.
 */
export class DatabaseQueryError extends DedupQueueError {
  /** The SQLSTATE, e.g. `'23514'` for a check violation. */
  readonly code?: string;
  /** The constraint or index named by the server, if any. */
  readonly constraint?: string;

  constructor(
    /** The driver's error. */
    override readonly cause: unknown,
  ) {
    const fields = (cause ?? {}) as ServerErrorFields;
    super(
      `Postgres refused a statement of nest-dedup-queue: ${fields.code ? `${fields.code}: ` : ''}${fields.message ?? String(cause)}`,
    );
    this.code = fields.code;
    this.constraint = fields.constraint;
  }
}
