import type { ListWorkflowsOptions } from '../../../interfaces/list-workflows-options.interface';
import type { WorkflowStatus } from '../../../interfaces/workflow-status.interface';
import type { QueueDatabase } from '../../connection/queue-database';
import { ACTIVE_TABLE_WORKFLOW_STATUSES_SQL, HISTORY_STATUSES } from '../../tables/workflow-status.sql';
import { WorkflowTables, workflowTables } from '../../tables/workflow-tables';
import { HistoryRead, HistoryWindow, HistoryWindows, hasHistoryDeduplicationIndex } from './history-windows';
import { REPORTED_STATUS_SQL, WORKFLOW_ROW_COLUMNS, WorkflowRow } from '../workflow-row';

const NEWEST_FIRST = 'ORDER BY created_at DESC, seq DESC';

/** `created_at` in microseconds since the epoch, as text; `±infinity` as the ends of a bigint. */
const ORDER_COLUMNS = `CASE WHEN created_at = 'infinity' THEN '9223372036854775807'
  WHEN created_at = '-infinity' THEN '-9223372036854775808'
  ELSE (extract(epoch FROM created_at) * 1000000)::bigint::text END AS created_us, seq::text AS seq`;

/** A listed row with what orders it. */
type ListedRow = WorkflowRow & { created_us: string; seq: string };

/** The filter as SQL conditions shared by both tables, and their parameters. */
interface Conditions {
  conditions: string[];
  params: unknown[];
}

/**
 * `QueueService.list()`: workflows newest first by creation time (ties: the later `seq` first), as
 * `ORDER BY created_at DESC, seq DESC` over the `workflows` view gives them. The active table's matching rows (a
 * small table) are read at once; the history's, which since migration 023 has no ordered index but its children's
 * (and the opt-in deduplication ID index), newest first in windows of creation time (`HistoryWindows`) until
 * `offset + limit` rows are known to be the newest: a filter that matches often reads a few windows. There is no
 * budget: a filter that matches few rows walks the windows down to the oldest row. Its reads share one snapshot (a
 * read-only REPEATABLE READ transaction; on Citus, one per node), as the one statement over the view did: a workflow
 * that finishes, or is resumed, meanwhile is listed once.
 */
export class WorkflowList {
  private readonly tables: WorkflowTables;

  constructor(private readonly database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
  }

  /** The rows of `filter` from `offset`, at most `limit` (default 100). */
  async read(filter: ListWorkflowsOptions): Promise<WorkflowRow[]> {
    const offset = filter.offset ?? 0;
    const needed = offset + (filter.limit ?? 100);
    const wanted = filter.status === undefined ? undefined : [filter.status].flat();
    const [active, history] = await this.database.transaction(async (query) => {
      await query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY');
      const activeRows = await this.activeRows(query, filter, wanted, needed);
      return [activeRows, await this.historyRows(query, filter, wanted, needed, activeRows)];
    });
    return [...active, ...history]
      .sort(newestFirst)
      .slice(offset, needed)
      .map(({ created_us: _created, seq: _seq, ...row }) => row);
  }

  /** The newest `needed` matching workflows of the active table (not its key records of finished ones). */
  private async activeRows(
    query: HistoryRead,
    filter: ListWorkflowsOptions,
    wanted: WorkflowStatus[] | undefined,
    needed: number,
  ): Promise<ListedRow[]> {
    if (wanted?.every((status) => HISTORY_STATUSES.includes(status))) return [];
    const { conditions, params } = this.conditions(filter);
    conditions.push(`status IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL}`);
    if (wanted) {
      params.push(
        wanted.map((status) => (status === 'DELAYED' ? 'ENQUEUED' : status)),
        wanted,
      );
      const [stored, reported] = [params.length - 1, params.length];
      conditions.push(`status = ANY($${stored}::text[]) AND ${REPORTED_STATUS_SQL} = ANY($${reported}::text[])`);
    }
    params.push(needed);
    return query<ListedRow>(
      `SELECT ${WORKFLOW_ROW_COLUMNS}, ${ORDER_COLUMNS} FROM ${this.tables.active}
       WHERE ${conditions.join(' AND ')} ${NEWEST_FIRST} LIMIT $${params.length}`,
      params,
    );
  }

  /**
   * The history's rows that may be among the newest `needed`: by an index when the filter has one, else in windows,
   * until the rows found in both tables from the window's start on are `needed`.
   */
  private async historyRows(
    query: HistoryRead,
    filter: ListWorkflowsOptions,
    wanted: WorkflowStatus[] | undefined,
    needed: number,
    active: ListedRow[],
  ): Promise<ListedRow[]> {
    const statuses = wanted?.filter((status) => HISTORY_STATUSES.includes(status));
    if (statuses?.length === 0) return [];
    const { conditions, params } = this.conditions(filter);
    if (statuses) {
      params.push(statuses);
      conditions.push(`status = ANY($${params.length}::text[])`);
    }
    if (await this.indexed(query, filter)) {
      params.push(needed);
      return query<ListedRow>(
        `SELECT ${WORKFLOW_ROW_COLUMNS}, ${ORDER_COLUMNS} FROM ${this.tables.history}
         WHERE ${conditions.join(' AND ')} ${NEWEST_FIRST} LIMIT $${params.length}`,
        params,
      );
    }
    const rows: ListedRow[] = [];
    const windows = new HistoryWindows(query, this.tables.history, filter.queueName);
    await windows.walk({}, Infinity, async (window) => {
      const columns = `${WORKFLOW_ROW_COLUMNS}, ${ORDER_COLUMNS}`;
      const page = await windows.page<ListedRow>(window, { columns, conditions, params, limit: needed - rows.length });
      rows.push(...page.rows);
      return { seen: page.seen, enough: rows.length + newerThan(active, window) >= needed };
    });
    return rows;
  }

  /** Whether an index serves the filter in the history: the children's, or the opt-in deduplication ID index. */
  private async indexed(query: HistoryRead, filter: ListWorkflowsOptions): Promise<boolean> {
    if (filter.parentWorkflowId !== undefined) return true;
    return filter.deduplicationId !== undefined && hasHistoryDeduplicationIndex(query, this.database.schemaSql);
  }

  private conditions(filter: ListWorkflowsOptions): Conditions {
    const conditions: string[] = [];
    const params: unknown[] = [];
    const where = (column: string, value: unknown) => {
      if (value === undefined) return;
      params.push(value);
      conditions.push(`${column} = $${params.length}`);
    };
    where('queue_name', filter.queueName);
    where('workflow_name', filter.workflowName);
    where('deduplication_id', filter.deduplicationId);
    where('parent_workflow_id', filter.parentWorkflowId);
    return { conditions, params };
  }
}

/**
 * How many of the active rows are created in `window` or after it: rows older than the window's start rank below
 * all of those, so once these and the history's rows found reach the rows needed, no older row is.
 */
function newerThan(active: ListedRow[], window: HistoryWindow): number {
  if (!window.lo) return 0;
  const lo = BigInt(window.lo.getTime()) * 1000n;
  return active.filter((row) => BigInt(row.created_us) >= lo).length;
}

function newestFirst(a: ListedRow, b: ListedRow): number {
  const [x, y] = [BigInt(a.created_us), BigInt(b.created_us)];
  if (x !== y) return y > x ? 1 : -1;
  const [s, t] = [BigInt(a.seq), BigInt(b.seq)];
  return s === t ? 0 : t > s ? 1 : -1;
}
