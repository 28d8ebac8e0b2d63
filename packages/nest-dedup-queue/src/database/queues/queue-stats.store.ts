import type { WorkflowStatus } from '../../interfaces/workflow-status.interface';
import { settleWithin } from '../../utils/settle-within';
import type { Query, QueueDatabase } from '../connection/queue-database';
import { REPORTED_STATUS_SQL } from '../workflows/workflow-row';
import { ACTIVE_STATUSES_SQL, STATUS_SQL } from '../tables/workflow-status.sql';
import { workflowTables } from '../tables/workflow-tables';
import { logicalQueueName } from '../../utils/queue-shards';

export interface StatusCount {
  queueName: string;
  status: WorkflowStatus;
  count: number;
}

/** How long the oldest due ENQUEUED workflow of each queue has waited, in seconds (queues with none are absent). */
export type OldestWaits = Map<string, number>;

/**
 * The cluster-wide numbers behind the metrics gauges, read at scrape time. ENQUEUED, PENDING and WAITING are counted
 * by one scan of the active table (no index names the status since migration 025: a claim then moves no index
 * entry); the finished statuses need a scan of the history and are counted by a separate statement that the caller
 * runs less often. Each read runs under a statement timeout.
 */
export class QueueStatsStore {
  private readonly table: string;
  private readonly workflows: string;

  constructor(private readonly database: QueueDatabase) {
    this.table = workflowTables(database.schemaSql).active;
    this.workflows = workflowTables(database.schemaSql).workflows;
  }

  /** ENQUEUED (ready), DELAYED, PENDING and WAITING workflows per queue, and the wait of each queue's oldest due workflow. */
  async active(timeoutMs: number): Promise<{ counts: StatusCount[]; oldestWaits: OldestWaits }> {
    const rows = await this.withTimeout(timeoutMs, (query) =>
      query<{ queue_name: string; status: WorkflowStatus; n: number; oldest_wait: number | null }>(
        `SELECT queue_name, ${REPORTED_STATUS_SQL} AS status, count(*)::float8 AS n,
                extract(epoch FROM now() - min(greatest(created_at, not_before))
                                   FILTER (WHERE status = ${STATUS_SQL.ENQUEUED}
                                             AND (not_before IS NULL OR not_before <= now())
                                             AND isfinite(greatest(created_at, not_before))))::float8 AS oldest_wait
         FROM ${this.table}
         WHERE status IN (${STATUS_SQL.ENQUEUED}, ${STATUS_SQL.PENDING}, ${STATUS_SQL.WAITING})
         GROUP BY queue_name, 2`,
      ),
    );
    const oldestWaits: OldestWaits = new Map();
    for (const row of rows) {
      if (row.oldest_wait === null) continue;
      const queueName = logicalQueueName(row.queue_name);
      oldestWaits.set(queueName, Math.max(oldestWaits.get(queueName) ?? 0, row.oldest_wait));
    }
    return { counts: byQueue(rows), oldestWaits };
  }

  /** SUCCESS, ERROR, CANCELLED and MAX_RECOVERY_ATTEMPTS_EXCEEDED workflows per queue (a scan of the table). */
  async finished(timeoutMs: number): Promise<StatusCount[]> {
    const rows = await this.withTimeout(timeoutMs, (query) =>
      query<{ queue_name: string; status: WorkflowStatus; n: number }>(
        `SELECT queue_name, status, count(*)::float8 AS n FROM ${this.workflows}
         WHERE status NOT IN ${ACTIVE_STATUSES_SQL} GROUP BY queue_name, status`,
      ),
    );
    return byQueue(rows);
  }

  /** NOTE: the statement timeout ends the query on the server; the timer also covers waiting for a connection. */
  private withTimeout<T>(timeoutMs: number, read: (query: Query) => Promise<T>): Promise<T> {
    const reading = this.database.transaction(async (query) => {
      await query(`SET LOCAL statement_timeout = ${Math.max(1, Math.floor(timeoutMs))}`);
      return read(query);
    });
    return settleWithin(reading, timeoutMs, `no answer within ${timeoutMs} ms`);
  }
}

/** The counts per queue and status, those of a sharded queue's shards added up (see `logicalQueueName`). */
function byQueue(rows: { queue_name: string; status: WorkflowStatus; n: number }[]): StatusCount[] {
  const counts = new Map<string, StatusCount>();
  for (const row of rows) {
    const queueName = logicalQueueName(row.queue_name);
    const key = JSON.stringify([queueName, row.status]);
    const count = counts.get(key);
    if (count) count.count += row.n;
    else counts.set(key, { queueName, status: row.status, count: row.n });
  }
  return [...counts.values()];
}
