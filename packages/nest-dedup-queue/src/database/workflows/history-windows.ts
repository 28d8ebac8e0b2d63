/** Runs a read: on a pooled connection (`QueueDatabase.query`), or in a transaction (one snapshot for a whole walk). */
export type HistoryRead = <R = Record<string, unknown>>(sql: string, params: unknown[]) => Promise<R[]>;

/**
 * The rows a window of creation time should hold: windows grow (4 times while they hold under a quarter of it, twice
 * under it) and shrink past 4 times it.
 */
const WINDOW_ROWS = 5_000;
const FIRST_WINDOW_MS = 2_000;
/** Before this time (year 1900) the walk ends with one window open below (rows with odd times, `-infinity`). */
const OLDEST_WINDOW_MS = Date.UTC(1900, 0, 1);

/** A window of creation time: `[lo, hi)`, `hi` open when undefined; `lo` undefined: open below. */
export interface HistoryWindow {
  lo?: Date;
  hi?: Date;
}

/** What a window's visit says: how many history rows it read, and whether the caller has all it needs. */
export interface WindowVisit {
  seen: number;
  enough: boolean;
}

/** How a walk ended: `complete` (every older row read, or enough found), else stopped at `stoppedAt` by the budget. */
export interface WalkEnd {
  complete: boolean;
  stoppedAt?: Date;
}

/**
 * Reads the history newest first without an ordered index (since migration 023 it has only its workflow ID B-tree
 * and BRIN ranges on `created_at` and `completed_at`): in windows of creation time, each read through the BRIN
 * index (16 pages a range), sized to hold about `WINDOW_ROWS` rows, until the caller has enough, nothing older is
 * left, or the caller's budget of rows was read.
 */
export class HistoryWindows {
  /**
   * `queueName`: the walk reads one queue's rows only (its look-up of older rows names the queue, so that on Citus it
   * runs on the queue's node).
   */
  constructor(
    private readonly read: HistoryRead,
    private readonly history: string,
    private readonly queueName?: string,
  ) {}

  /**
   * Visits windows from `before` (exclusive; now, open above, when undefined) back to `floor` (inclusive) or the
   * oldest row, until `visit` has enough or `budget` rows were read (`WalkEnd.stoppedAt`).
   */
  async walk(
    range: { before?: Date; floor?: Date },
    budget: number,
    visit: (window: HistoryWindow) => Promise<WindowVisit>,
  ): Promise<WalkEnd> {
    let hi = range.before;
    let width = FIRST_WINDOW_MS;
    let read = 0;
    for (;;) {
      const top = hi?.getTime() ?? Date.now();
      const lowest = range.floor?.getTime() ?? OLDEST_WINDOW_MS;
      const last = top - width <= lowest;
      const lo = last ? range.floor : new Date(top - width);
      const { seen, enough } = await visit({ lo, hi });
      read += seen;
      if (enough || last || !lo) return { complete: true };
      if (seen === 0 && !(await this.olderExists(lo))) return { complete: true };
      if (read >= budget) return { complete: false, stoppedAt: lo };
      hi = lo;
      if (seen < WINDOW_ROWS / 4) width *= 4;
      else if (seen < WINDOW_ROWS) width *= 2;
      else if (seen > WINDOW_ROWS * 4) width = Math.max(1, Math.floor(width / 2));
    }
  }

  /** The condition of `window` on `created_at`, its values appended to `params`. */
  static condition(window: HistoryWindow, params: unknown[]): string {
    const parts: string[] = [];
    if (window.lo) {
      params.push(window.lo);
      parts.push(`created_at >= $${params.length}::timestamptz`);
    }
    if (window.hi) {
      params.push(window.hi);
      parts.push(`created_at < $${params.length}::timestamptz`);
    }
    return parts.length ? parts.join(' AND ') : 'true';
  }

  /** Whether any history row was created before `time` (BRIN ranges: reads none when none is). */
  private async olderExists(time: Date): Promise<boolean> {
    const rows =
      this.queueName === undefined
        ? await this.read(`SELECT 1 FROM ${this.history} WHERE created_at < $1 LIMIT 1`, [time])
        : await this.read(`SELECT 1 FROM ${this.history} WHERE queue_name = $1 AND created_at < $2 LIMIT 1`, [
            this.queueName,
            time,
          ]);
    return rows.length > 0;
  }
}
