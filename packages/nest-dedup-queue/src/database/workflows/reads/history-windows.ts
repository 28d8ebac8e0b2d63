import { HISTORY_DEDUPLICATION_INDEX } from '../../tables/workflow-tables';

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
   * `queueName`: the walk reads one queue's rows only (its look-up of older rows and its windows' counts name the
   * queue, so that on Citus they run on the queue's node).
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

  /**
   * The rows of `window` that match `conditions` (their values in `params`), newest first, at most `limit`, as
   * `columns`; and how many rows the window holds (of this walk's queue only, when it has one), which sizes the next
   * window. NOTE: the window's rows are counted apart (a count reads no column), and only the matching ones are read.
   */
  async page<R extends { workflow_id: string | null }>(
    window: HistoryWindow,
    select: { columns: string; conditions: string[]; params: unknown[]; limit: number },
  ): Promise<{ rows: R[]; seen: number }> {
    const params = [...select.params];
    const where = HistoryWindows.condition(window, params);
    params.push(select.limit);
    const limitParam = `$${params.length}`;
    let counted = where;
    if (this.queueName !== undefined) {
      params.push(this.queueName);
      counted = `queue_name = $${params.length} AND ${where}`;
    }
    const read = await this.read<R & { seen: number }>(
      `SELECT window_rows.seen, page.*
       FROM (SELECT count(*)::int AS seen FROM ${this.history} WHERE ${counted}) AS window_rows
       LEFT JOIN LATERAL (
         SELECT ${select.columns} FROM ${this.history} WHERE ${[where, ...select.conditions].join(' AND ')}
         ORDER BY created_at DESC, seq DESC LIMIT ${limitParam}
       ) AS page ON true`,
      params,
    );
    const rows: R[] = [];
    for (const { seen: _seen, ...row } of read) if (row.workflow_id !== null) rows.push(row as unknown as R);
    return { rows, seen: read[0]?.seen ?? 0 };
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

/**
 * Whether the opt-in index `HISTORY_DEDUPLICATION_INDEX` exists in the schema `schemaSql`: with it, a deduplication ID
 * is looked up in the history by the index instead of in windows.
 */
export async function hasHistoryDeduplicationIndex(read: HistoryRead, schemaSql: string): Promise<boolean> {
  const rows = await read<{ present: boolean }>(`SELECT to_regclass($1) IS NOT NULL AS present`, [
    `${schemaSql}.${HISTORY_DEDUPLICATION_INDEX}`,
  ]);
  return rows[0].present;
}
