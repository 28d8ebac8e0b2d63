import { Query } from 'pg';

/** The largest row count the protocol's Execute message takes: every row of the statement. */
const ALL_ROWS = 2 ** 31 - 1;

/** The parts of `pg`'s protocol connection and `Query` this class takes part in (not in `@types/pg`). */
interface ProtocolConnection {
  sync(): void;
}

interface QueryInternals {
  _result: { rows: unknown[] };
  handleCommandComplete(message: unknown, connection: ProtocolConnection): void;
  handleError(error: Error, connection: ProtocolConnection): void;
}

const QUERY = Query.prototype as unknown as QueryInternals;

/**
 * One statement sent so that its rows arrive before its commit: `Execute` then `Flush` (as `pg` does for a query with
 * a row count), so the server sends the rows as soon as the statement has run, and `Sync`, which ends the statement's
 * implicit transaction with its commit, only once they are in. `beforeCommit` gets the rows then; `done` gets them
 * (or the error) after the commit, as a plain query would. A statement that fails before its rows sends the `Sync`
 * the server waits for after an error, so the connection stays usable.
 */
export class RowsBeforeCommitQuery<R> extends Query {
  private synced = false;

  constructor(
    statement: { text: string; values: unknown[]; name?: string; types?: unknown },
    private readonly beforeCommit: (rows: R[]) => void,
    done: (error: Error | undefined, rows: R[]) => void,
  ) {
    super({ ...statement, rows: ALL_ROWS } as ConstructorParameters<typeof Query>[0], (error, result) =>
      done(error ?? undefined, (result as unknown as { rows: R[] } | undefined)?.rows ?? []),
    );
  }

  handleCommandComplete(message: unknown, connection: ProtocolConnection): void {
    QUERY.handleCommandComplete.call(this, message, connection);
    this.synced = true;
    this.beforeCommit((this as unknown as QueryInternals)._result.rows as R[]);
  }

  handleError(error: Error, connection: ProtocolConnection): void {
    if (!this.synced) {
      this.synced = true;
      connection.sync();
    }
    QUERY.handleError.call(this, error, connection);
  }
}
