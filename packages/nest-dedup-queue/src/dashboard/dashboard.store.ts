import type { QueryOptions, QueueDatabase } from '../database/connection/queue-database';
import type { NewWorkflow } from '../database/workflows/new-workflow';
import { WorkflowTables, workflowTables } from '../database/tables/workflow-tables';
import { REPORTED_STATUS_SQL } from '../database/workflows/workflow-row';
import type { WorkflowErrorInfo, WorkflowStatus } from '../interfaces/workflow-status.interface';
import {
  ACTIVE_TABLE_WORKFLOW_STATUSES_SQL,
  DELAYED_SQL,
  HISTORY_STATUSES,
  NOT_PENDING_SQL,
  READY_SQL,
  STATUS_SQL,
} from '../database/tables/workflow-status.sql';
import { HistoryRead, HistoryWindows, hasHistoryDeduplicationIndex } from '../database/workflows/reads/history-windows';
import { logicalQueueName } from '../utils/queue-shards';

/** How many history rows a request reads at most: for a page, a list's total, the counts per queue and status. */
const HISTORY_READ_BUDGET = 200_000;
const COUNT_READ_BUDGET = 100_000;
const STATUS_COUNT_READ_BUDGET = 50_000;

/** Where a list page ends: the `(created_at, seq)` of its last row, created_at in microseconds since the epoch. */
export interface ListCursor {
  createdAtMicros: string;
  seq: string;
}

/** The filters of a list; all optional, combined with AND. */
export interface WorkflowListFilter {
  /** The names a queue's rows are stored under (see `storedQueueNames`): its own, and on Citus its shards'. */
  queueNames?: string[];
  statuses?: WorkflowStatus[];
  workflowName?: string;
  deduplicationId?: string;
  partitionKey?: string;
  /** A workflow ID or a deduplication ID. */
  search?: string;
  createdFrom?: Date;
  createdTo?: Date;
  /** Children of this workflow (see `QueueService.list`'s `parentWorkflowId`). */
  parentWorkflowId?: string;
}

export interface SummaryRow {
  workflow_id: string;
  queue_name: string;
  workflow_name: string;
  workflow_version: number;
  forked_from: string | null;
  status: WorkflowStatus;
  deduplication_id: string | null;
  holds_key: boolean;
  partition_key: string | null;
  priority: number;
  attempts: number;
  executor_id: string | null;
  created_at: Date;
  started_at: Date | null;
  completed_at: Date | null;
  not_before: Date | null;
  parent_workflow_id: string | null;
  /** Null for an infinite `created_at` (a row written by hand): no page can start after it. */
  created_us: string | null;
  /** bigint, read by pg as a string. */
  seq: string;
}

export interface DetailRow extends SummaryRow {
  inputs: unknown;
  output: unknown;
  error: WorkflowErrorInfo | null;
  failed_attempts: number;
  max_attempts: number;
  recovery_attempts: number;
  max_recovery_attempts: number;
  timeout_ms: number | null;
  deadline_at: Date | null;
  updated_at: Date;
}

export interface StepRow {
  step_index: number;
  step_name: string;
  output: unknown;
  error: WorkflowErrorInfo | null;
  started_at: Date | null;
  completed_at: Date;
  duration_ms: number | null;
}

/** Per queue (its shards' rows added up) and status: the count, read up to a limit. */
export interface StatusCountRow {
  queue_name: string;
  status: WorkflowStatus;
  count: number;
}

const SUMMARY_COLUMNS = `workflow_id, queue_name, workflow_name, workflow_version, forked_from,
  ${REPORTED_STATUS_SQL} AS status, deduplication_id,
  active_deduplication_id IS NOT NULL AS holds_key, partition_key, priority, attempts, executor_id, created_at,
  started_at, completed_at, not_before, parent_workflow_id,
  CASE WHEN isfinite(created_at) THEN (extract(epoch FROM created_at) * 1000000)::bigint::text END AS created_us, seq`;

/** `SUMMARY_COLUMNS` of a history row: it holds its key while its deduplication window is open (as the view says). */
const HISTORY_SUMMARY_COLUMNS = SUMMARY_COLUMNS.replace(
  'active_deduplication_id IS NOT NULL AS holds_key',
  '(active_deduplication_id IS NOT NULL AND dedup_expires_at > now()) AS holds_key',
);

const NEWEST_FIRST = 'ORDER BY created_at DESC, seq DESC';

/** A page of a list: its rows, and where the next page starts when the history's read budget stopped this one. */
export interface SummaryPage {
  rows: SummaryRow[];
  /** The cursor of the next page when this one has fewer rows than asked because the history was read in part. */
  resumeCursor?: string;
}

/** A capped count: `complete` unless the history's read budget stopped it (then it is a lower bound). */
export interface CappedCount {
  count: number;
  complete: boolean;
}

/** Every statement here is a read: safe to send again when a connection broke. */
const READ: QueryOptions = { idempotent: true };
/** The reads of every refresh of the page, parsed and planned once per connection. */
const PREPARED_READ: QueryOptions = { prepared: true, idempotent: true };

/**
 * The SQL of the dashboard: capped counts, recent throughput, filtered lists paged by `(created_at, seq)`, one
 * workflow with its steps. The active table is read by its indexes, split by status and queue (see `list`); the
 * history, which since migration 023 has no ordered index but its workflow ID's (and the children's), newest first
 * in windows of creation time (`HistoryWindows`), within a read budget: no request reads the whole history of a
 * busy system, and a count or a page it stopped says so.
 */
export class DashboardStore {
  private readonly tables: WorkflowTables;
  private readonly table: string;
  private readonly steps: string;
  private readonly queues: string;

  private readonly windows: HistoryWindows;
  private readonly read: HistoryRead = (sql, params) => this.database.query(sql, params, READ);

  /**
   * @param storedNames the names the rows of a queue are stored under (see `storedQueueNames`); what this store reads
   * by those names it reports by the queue's own (see `logicalQueueName`).
   */
  constructor(
    private readonly database: QueueDatabase,
    private readonly storedNames: (queueName: string) => string[],
  ) {
    this.tables = workflowTables(database.schemaSql);
    this.windows = new HistoryWindows(this.read, this.tables.history);
    this.table = this.tables.workflows;
    this.steps = this.tables.steps;
    this.queues = `${database.schemaSql}.queues`;
  }

  /**
   * For each queue and status, how many workflows, counting at most `limit` + 1 (those of every name the queue is
   * stored under added up): the active table's statuses by its indexes, the history's in windows (see
   * `HistoryWindows`); `complete` is false when the read budget stopped the history's (its counts are then lower
   * bounds).
   */
  async statusCounts(
    queueNames: string[],
    statuses: readonly WorkflowStatus[],
    limit: number,
  ): Promise<{ rows: StatusCountRow[]; complete: boolean }> {
    const params: unknown[] = [limit + 1];
    const param = (value: unknown) => {
      params.push(value);
      return `$${params.length}`;
    };
    const pairs = queueNames
      .flatMap((queueName) => this.storedNames(queueName))
      .flatMap((queueName) =>
        statuses
          .filter((status) => !HISTORY_STATUSES.includes(status))
          .map((status) => {
            const [queue, wanted] = [param(queueName), param(status)];
            return `SELECT ${queue}::text AS queue_name, ${wanted}::text AS status,
                  (SELECT count(*)::int FROM (SELECT 1 FROM ${this.tables.active}
                                              WHERE queue_name = ${queue} AND ${statusCondition(status, param)}
                                                AND status IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL}
                                              LIMIT $1) AS capped) AS count`;
          }),
      );
    const counted = pairs.length
      ? await this.database.query<StatusCountRow>(pairs.join('\nUNION ALL\n'), params, READ)
      : [];
    const activeCounts = new Map<string, number>();
    for (const row of counted) {
      const key = `${logicalQueueName(row.queue_name)}\u0000${row.status}`;
      activeCounts.set(key, (activeCounts.get(key) ?? 0) + row.count);
    }
    const active = [...activeCounts].map(([key, count]) => {
      const [queue_name, status] = key.split('\u0000');
      return { queue_name, status: status as WorkflowStatus, count: Math.min(limit + 1, count) };
    });
    const finished = statuses.filter((status) => HISTORY_STATUSES.includes(status));
    const counts = new Map<string, number>();
    const end = finished.length
      ? await this.windows.walk({}, STATUS_COUNT_READ_BUDGET, async (window) => {
          const windowParams: unknown[] = [];
          const rows = await this.database.query<{ queue_name: string; status: WorkflowStatus; n: number }>(
            `SELECT queue_name, status, count(*)::int AS n FROM ${this.tables.history}
             WHERE ${HistoryWindows.condition(window, windowParams)} GROUP BY queue_name, status`,
            windowParams,
            READ,
          );
          for (const row of rows) {
            const key = `${logicalQueueName(row.queue_name)}\u0000${row.status}`;
            counts.set(key, (counts.get(key) ?? 0) + row.n);
          }
          const enough = queueNames.every((queue) =>
            finished.every((status) => (counts.get(`${queue}\u0000${status}`) ?? 0) > limit),
          );
          return { seen: rows.reduce((sum, row) => sum + row.n, 0), enough };
        })
      : { complete: true };
    const history = queueNames.flatMap((queue) =>
      finished.map((status) => ({
        queue_name: queue,
        status,
        count: Math.min(limit + 1, counts.get(`${queue}\u0000${status}`) ?? 0),
      })),
    );
    return { rows: [...active, ...history], complete: end.complete };
  }

  /**
   * The planner's estimate of a queue's rows in a status, from the table's statistics (row count times the most
   * common values' frequencies of `queue_name` and `status`), as Postgres itself estimates it; a queue's frequency
   * is that of every name it is stored under.
   */
  async estimatedCounts(): Promise<{ rows: number; queues: Map<string, number>; statuses: Map<string, number> }> {
    const stats = await this.database.query<{
      relname: string;
      attname: string;
      vals: string[] | null;
      freqs: number[] | null;
      rows: number;
    }>(
      `SELECT c.relname, a.attname, s.most_common_vals::text::text[] AS vals, s.most_common_freqs AS freqs,
              greatest(c.reltuples, 0)::float8 AS rows
       FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
       CROSS JOIN (VALUES ('queue_name'), ('status')) AS a(attname)
       LEFT JOIN pg_stats AS s ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = a.attname
       WHERE n.nspname = $1 AND c.relkind = 'r'
         AND (c.relname = 'workflow_queue'
              OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = '${this.tables.history}'::regclass))`,
      [this.database.schema],
      READ,
    );
    const rowsOf = new Map(stats.map((stat) => [stat.relname, stat.rows]));
    const rows = [...rowsOf.values()].reduce((sum, n) => sum + n, 0);
    // NOTE: each table's frequencies weighed by its rows, as the planner would see one table of them all.
    const frequencies = (attname: string) => {
      const counts = new Map<string, number>();
      for (const stat of stats.filter((row) => row.attname === attname)) {
        (stat.vals ?? []).forEach((value, index) =>
          counts.set(value, (counts.get(value) ?? 0) + (stat.freqs?.[index] ?? 0) * stat.rows),
        );
      }
      return new Map([...counts].map(([value, count]) => [value, rows > 0 ? count / rows : 0]));
    };
    const queues = new Map<string, number>();
    for (const [name, frequency] of frequencies('queue_name')) {
      queues.set(logicalQueueName(name), (queues.get(logicalQueueName(name)) ?? 0) + frequency);
    }
    return { rows, queues, statuses: frequencies('status') };
  }

  /**
   * Per queue (its shards' added up), how many workflows finished in the last minute and the last 5 minutes (the
   * completed_at index).
   */
  async finishedRecently(): Promise<Array<{ queue_name: string; last_minute: number; last_5_minutes: number }>> {
    const rows = await this.database.query<{ queue_name: string; last_minute: number; last_5_minutes: number }>(
      `SELECT queue_name, count(*) FILTER (WHERE completed_at > now() - interval '1 minute')::int AS last_minute,
              count(*)::int AS last_5_minutes
       FROM ${this.tables.history}
       WHERE completed_at > now() - interval '5 minutes'
       GROUP BY queue_name`,
      [],
      PREPARED_READ,
    );
    const byQueue = new Map<string, { queue_name: string; last_minute: number; last_5_minutes: number }>();
    for (const row of rows) {
      const queue_name = logicalQueueName(row.queue_name);
      const sum = byQueue.get(queue_name) ?? { queue_name, last_minute: 0, last_5_minutes: 0 };
      byQueue.set(queue_name, {
        queue_name,
        last_minute: sum.last_minute + row.last_minute,
        last_5_minutes: sum.last_5_minutes + row.last_5_minutes,
      });
    }
    return [...byQueue.values()];
  }

  /**
   * One page of workflows, newest first, after `cursor`: the active table's page (see `activePage`) merged with the
   * history's (see `historyPage`). When the history's read budget stopped before a full page, the page ends where the
   * history was read to, and `resumeCursor` continues from there.
   */
  async list(
    filter: WorkflowListFilter,
    cursor: ListCursor | undefined,
    limit: number,
    allStatuses: readonly WorkflowStatus[],
  ): Promise<SummaryPage> {
    const [active, history] = await Promise.all([
      this.activePage(filter, cursor, limit, allStatuses),
      this.historyPage(filter, cursor, limit),
    ]);
    const micros = (row: SummaryRow) => BigInt(row.created_us ?? '-9223372036854775808');
    let rows = [...active, ...history.rows].sort((a, b) => {
      const [x, y] = [micros(a), micros(b)];
      return x === y ? Number(BigInt(b.seq) - BigInt(a.seq)) : y > x ? 1 : -1;
    });
    if (!history.stoppedAt) return { rows: rows.slice(0, limit) };
    const stoppedMicros = BigInt(history.stoppedAt.getTime()) * 1000n;
    rows = rows.filter((row) => row.created_us !== null && micros(row) >= stoppedMicros).slice(0, limit);
    return rows.length < limit ? { rows, resumeCursor: `${stoppedMicros}.0` } : { rows };
  }

  /**
   * How many workflows match, counting at most `limit` + 1: the active table's by the branches of `list`, the
   * history's in windows (or by an index, see `historyIndexed`); not `complete` when the history's read budget stopped.
   */
  async count(filter: WorkflowListFilter, limit: number, allStatuses: readonly WorkflowStatus[]): Promise<CappedCount> {
    const [active, history] = await Promise.all([
      this.activeCount(filter, limit, allStatuses),
      this.historyCount(filter, limit),
    ]);
    return { count: Math.min(limit + 1, active + history.count), complete: history.complete };
  }

  /**
   * The active table's page. NOTE: Postgres cannot walk one index in (created_at, seq) order across several statuses,
   * and sorting a whole queue is what must not happen; so with a queue, a workflow name or a status, each status
   * (and, without queue and name, each queue) is read as its own UNION ALL branch, `limit` rows at most, and the
   * branches are merged; otherwise PENDING rows and the others are the two branches. Its values are bound parameters
   * of an unnamed statement, so each branch is planned for its own status.
   */
  private async activePage(
    filter: WorkflowListFilter,
    cursor: ListCursor | undefined,
    limit: number,
    allStatuses: readonly WorkflowStatus[],
  ): Promise<SummaryRow[]> {
    const statuses = activeStatuses(filter, allStatuses);
    if (statuses.length === 0) return [];
    const params: unknown[] = [];
    const branches = await this.branches({ ...filter, statuses }, statuses, params);
    const after = cursor ? [cursorCondition(cursor, params)] : [];
    params.push(limit);
    const limitParam = `$${params.length}`;
    const union = branches
      .map(
        (branch) =>
          `(SELECT ${SUMMARY_COLUMNS} FROM ${this.tables.active} ${whereClause([...branch, ...after, ACTIVE_ROWS_SQL])}
            ${NEWEST_FIRST} LIMIT ${limitParam})`,
      )
      .join(' UNION ALL ');
    return this.database.query<SummaryRow>(
      `SELECT * FROM (${union}) AS page ${NEWEST_FIRST} LIMIT ${limitParam}`,
      params,
      READ,
    );
  }

  private async activeCount(
    filter: WorkflowListFilter,
    limit: number,
    allStatuses: readonly WorkflowStatus[],
  ): Promise<number> {
    const statuses = activeStatuses(filter, allStatuses);
    if (statuses.length === 0) return 0;
    const params: unknown[] = [];
    const branches = await this.branches({ ...filter, statuses }, statuses, params);
    params.push(limit + 1);
    const limitParam = `$${params.length}`;
    const union = branches
      .map(
        (branch) =>
          `(SELECT 1 FROM ${this.tables.active} ${whereClause([...branch, ACTIVE_ROWS_SQL])} LIMIT ${limitParam})`,
      )
      .join(' UNION ALL ');
    const rows = await this.database.query<{ count: number }>(
      `SELECT count(*)::int AS count FROM (SELECT 1 FROM (${union}) AS hits LIMIT ${limitParam}) AS capped`,
      params,
      READ,
    );
    return rows[0].count;
  }

  /**
   * The history's page: by an index when the filter has one (`historyIndexed`), else in windows of creation time
   * newest first, each read once (its rows that match first, with how many it holds), until `limit` rows match, the
   * filter's `createdFrom`, or the read budget (`stoppedAt`).
   */
  private async historyPage(
    filter: WorkflowListFilter,
    cursor: ListCursor | undefined,
    limit: number,
  ): Promise<{ rows: SummaryRow[]; stoppedAt?: Date }> {
    const history = this.historyConditions(filter);
    if (!history) return { rows: [] };
    const { conditions, params } = history;
    if (cursor) conditions.push(cursorCondition(cursor, params));
    if (await this.historyIndexed(filter)) {
      params.push(limit);
      const rows = await this.database.query<SummaryRow>(
        `SELECT ${HISTORY_SUMMARY_COLUMNS} FROM ${this.tables.history} ${whereClause(conditions)}
         ${NEWEST_FIRST} LIMIT $${params.length}`,
        params,
        READ,
      );
      return { rows };
    }
    const rows: SummaryRow[] = [];
    const end = await this.windows.walk(this.historyRange(filter, cursor), HISTORY_READ_BUDGET, async (window) => {
      const select = { columns: HISTORY_SUMMARY_COLUMNS, conditions, params, limit: limit - rows.length };
      const page = await this.windows.page<SummaryRow>(window, select);
      rows.push(...page.rows);
      return { seen: page.seen, enough: rows.length >= limit };
    });
    return { rows, stoppedAt: end.stoppedAt };
  }

  private async historyCount(filter: WorkflowListFilter, limit: number): Promise<CappedCount> {
    const history = this.historyConditions(filter);
    if (!history) return { count: 0, complete: true };
    const { conditions, params } = history;
    if (await this.historyIndexed(filter)) {
      params.push(limit + 1);
      const rows = await this.database.query<{ count: number }>(
        `SELECT count(*)::int AS count
         FROM (SELECT 1 FROM ${this.tables.history} ${whereClause(conditions)} LIMIT $${params.length}) AS capped`,
        params,
        READ,
      );
      return { count: rows[0].count, complete: true };
    }
    let count = 0;
    const end = await this.windows.walk(this.historyRange(filter, undefined), COUNT_READ_BUDGET, async (window) => {
      const windowParams = [...params];
      const where = HistoryWindows.condition(window, windowParams);
      const [row] = await this.database.query<{ hits: number; seen: number }>(
        `SELECT count(*) FILTER (WHERE ${conditions.length ? conditions.join(' AND ') : 'true'})::int AS hits,
                count(*)::int AS seen
         FROM ${this.tables.history} WHERE ${where}`,
        windowParams,
        READ,
      );
      count += row.hits;
      return { seen: row.seen, enough: count > limit };
    });
    return { count: Math.min(count, limit + 1), complete: end.complete };
  }

  /** The filter's conditions on the history, or none when it asks only for statuses the history has not. */
  private historyConditions(filter: WorkflowListFilter): { conditions: string[]; params: unknown[] } | undefined {
    const statuses = filter.statuses?.filter((status) => HISTORY_STATUSES.includes(status));
    if (statuses?.length === 0) return undefined;
    const { conditions, params } = this.conditions(filter);
    if (statuses) {
      params.push(statuses);
      conditions.push(`status = ANY($${params.length}::text[])`);
    }
    return { conditions, params };
  }

  /** Where the history's windows start and end: the cursor or `createdTo`, and `createdFrom`. */
  private historyRange(filter: WorkflowListFilter, cursor: ListCursor | undefined): { before?: Date; floor?: Date } {
    const tops = [
      cursor ? Math.floor(Number(cursor.createdAtMicros) / 1000) + 1 : undefined,
      filter.createdTo?.getTime(),
    ].filter((top): top is number => top !== undefined);
    return {
      before: tops.length ? new Date(Math.min(...tops)) : undefined,
      floor: filter.createdFrom,
    };
  }

  /**
   * Whether an index serves the filter in the history: the children's (`parentWorkflowId`), or the opt-in
   * the opt-in deduplication ID index (`hasHistoryDeduplicationIndex`) for a deduplication ID or a search (a search matches the workflow ID too, which is
   * indexed).
   */
  private async historyIndexed(filter: WorkflowListFilter): Promise<boolean> {
    if (filter.parentWorkflowId !== undefined) return true;
    if (filter.deduplicationId === undefined && filter.search === undefined) return false;
    return hasHistoryDeduplicationIndex(this.read, this.database.schemaSql);
  }

  /**
   * The conditions of each branch a read is split into (see `list`), their values appended to `params`. With no
   * queue, name or status, or with a deduplication ID, partition key, search or parent (few rows to sort), one index
   * walk serves the rows that are not PENDING, and `workflows_running` the PENDING ones. Otherwise each status is a
   * branch, and with a queue, or without queue and name, each stored name of the queue (of every queue) one more:
   * a sharded queue's names are walked one by one, as several queues are.
   */
  private async branches(
    filter: WorkflowListFilter,
    allStatuses: readonly WorkflowStatus[],
    params: unknown[],
  ): Promise<string[][]> {
    const selective =
      filter.deduplicationId !== undefined ||
      filter.partitionKey !== undefined ||
      filter.search !== undefined ||
      filter.parentWorkflowId !== undefined;
    const keyed = filter.queueNames !== undefined || filter.workflowName !== undefined;
    const param = (value: unknown) => {
      params.push(value);
      return `$${params.length}`;
    };
    if (selective || (!keyed && !filter.statuses)) {
      const { conditions } = this.conditions(filter, params);
      if (filter.statuses) {
        conditions.push(`(${filter.statuses.map((status) => statusCondition(status, param)).join(' OR ')})`);
      }
      return [
        [...conditions, NOT_PENDING_SQL],
        [...conditions, `status = ${STATUS_SQL.PENDING}`],
      ];
    }
    const { conditions } = this.conditions({ ...filter, queueNames: undefined }, params);
    const byStatus = (filter.statuses ?? allStatuses).map((status) => [...conditions, statusCondition(status, param)]);
    const queueNames = filter.queueNames ?? (filter.workflowName === undefined ? await this.everyStoredName() : []);
    if (queueNames.length === 0) return byStatus;
    return byStatus.flatMap((branch) => queueNames.map((queueName) => [...branch, `queue_name = ${param(queueName)}`]));
  }

  /** Every name a queue's rows may be stored under: those of the queues in the queues table. */
  private async everyStoredName(): Promise<string[]> {
    const queues = await this.database.query<{ queue_name: string }>(
      `SELECT queue_name FROM ${this.queues}`,
      [],
      PREPARED_READ,
    );
    return [...new Set(queues.flatMap((queue) => this.storedNames(queue.queue_name)))];
  }

  async findDetail(workflowId: string): Promise<DetailRow | undefined> {
    const rows = await this.database.query<DetailRow>(
      `SELECT ${SUMMARY_COLUMNS}, inputs, output, error, failed_attempts, max_attempts, recovery_attempts,
              max_recovery_attempts, timeout_ms, deadline_at, updated_at
       FROM ${this.table} WHERE workflow_id = $1 LIMIT 1`,
      [workflowId],
      READ,
    );
    return rows[0];
  }

  /** What a re-run copies: everything a new workflow row needs except its ID and start time. */
  async findRerunSource(
    workflowId: string,
  ): Promise<Omit<NewWorkflow, 'workflowId' | 'workflowIdGiven' | 'runAt' | 'delayMs' | 'deadlineAt'> | undefined> {
    const rows = await this.database.query<
      Omit<NewWorkflow, 'workflowId' | 'workflowIdGiven' | 'runAt' | 'delayMs' | 'deadlineAt'>
    >(
      `SELECT queue_name AS "queueName", workflow_name AS "workflowName", workflow_version AS "version",
              NULL AS "forkedFrom", deduplication_id AS "deduplicationId",
              inputs::text AS "inputsJson", timeout_ms AS "timeoutMs", max_attempts AS "maxAttempts",
              max_recovery_attempts AS "maxRecoveryAttempts", partition_key AS "partitionKey", priority,
              dedup_window_ms AS "deduplicationWindowMs", release_key_on_error AS "releaseKeyOnError"
       FROM ${this.table} WHERE workflow_id = $1`,
      [workflowId],
      READ,
    );
    return rows[0];
  }

  async findSteps(workflowId: string): Promise<StepRow[]> {
    return this.database.query<StepRow>(
      `SELECT step_index, step_name, output, error, started_at, completed_at,
              CASE WHEN isfinite(completed_at) AND isfinite(started_at)
                   THEN (extract(epoch FROM completed_at - started_at) * 1000)::float8 END AS duration_ms
       FROM ${this.steps} WHERE workflow_id = $1 ORDER BY step_index`,
      [workflowId],
      READ,
    );
  }

  private conditions(filter: WorkflowListFilter, params: unknown[] = []): { conditions: string[]; params: unknown[] } {
    const conditions: string[] = [];
    const add = (sql: (param: string) => string, value: unknown) => {
      if (value === undefined) return;
      params.push(value);
      conditions.push(sql(`$${params.length}`));
    };
    const [onlyName, ...moreNames] = filter.queueNames ?? [];
    if (moreNames.length) add((p) => `queue_name = ANY(${p}::text[])`, filter.queueNames);
    else add((p) => `queue_name = ${p}`, onlyName);
    add((p) => `workflow_name = ${p}`, filter.workflowName);
    add((p) => `deduplication_id = ${p}`, filter.deduplicationId);
    add((p) => `partition_key = ${p}`, filter.partitionKey);
    add((p) => `(workflow_id = ${p} OR deduplication_id = ${p})`, filter.search);
    add((p) => `created_at >= ${p}`, filter.createdFrom);
    add((p) => `created_at < ${p}`, filter.createdTo);
    add((p) => `parent_workflow_id = ${p}`, filter.parentWorkflowId);
    return { conditions, params };
  }
}

/**
 * The condition for a reported status. NOTE: DELAYED is not stored (see `REPORTED_STATUS_SQL`): it and ENQUEUED are
 * told apart by the start time; every other status is its stored value, read from the index alone. A status other
 * than PENDING says so (`NOT_PENDING_SQL`), for the planner to use the list indexes, which leave PENDING rows out.
 */
function statusCondition(status: WorkflowStatus, param: (value: unknown) => string): string {
  if (status === 'PENDING') return `status = ${param(status)}`;
  const stored = status === 'DELAYED' ? DELAYED_SQL : status === 'ENQUEUED' ? READY_SQL : `status = ${param(status)}`;
  return `(${stored} AND ${NOT_PENDING_SQL})`;
}

/** The active table's rows that are workflows (not the key records of finished ones, which the history shows). */
const ACTIVE_ROWS_SQL = `status IN ${ACTIVE_TABLE_WORKFLOW_STATUSES_SQL}`;

/** The statuses a list reads in the active table: the filter's (or all), but the history's. */
function activeStatuses(filter: WorkflowListFilter, allStatuses: readonly WorkflowStatus[]): WorkflowStatus[] {
  return (filter.statuses ?? allStatuses).filter((status) => !HISTORY_STATUSES.includes(status));
}

/** Rows after `cursor` in the order newest first; its values appended to `params`. */
function cursorCondition(cursor: ListCursor, params: unknown[]): string {
  params.push(cursor.createdAtMicros, cursor.seq);
  const [micros, seq] = [`$${params.length - 1}::bigint`, `$${params.length}::bigint`];
  return `(created_at, seq) < (timestamptz 'epoch' + ${micros} * interval '1 microsecond', ${seq})`;
}

function whereClause(conditions: string[]): string {
  return conditions.length ? `WHERE ${conditions.join(' AND ')}` : '';
}
