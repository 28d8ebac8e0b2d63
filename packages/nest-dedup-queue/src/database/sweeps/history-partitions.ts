import type { Query, QueueDatabase } from '../connection/queue-database';
import { lockSchema } from '../connection/schema-lock';
import { isLockTimeout } from '../connection/sql-errors';
import { WorkflowTables, workflowTables } from '../tables/workflow-tables';

/** How many days of partitions exist ahead of today (UTC), so that no process has to create one in a hurry. */
export const PARTITION_DAYS_AHEAD = 7;

/** How long retention waits for the locks that dropping a partition takes before trying again at its next round. */
const DROP_LOCK_TIMEOUT_MS = 2000;

/**
 * The starts (`queue_starts`) retention keeps at least, whatever the retention: a claim of a rate-limited queue deletes
 * its own past its window; retention deletes those of queues no longer claimed with a rate limit.
 */
const STARTS_KEPT_AT_LEAST_MS = 86_400_000;

/**
 * The daily partitions of the history, the steps, the messages and the streams (by the day, UTC, a workflow was
 * created): a day's workflows, their steps, messages and streams live in `workflow_history_pYYYYMMDD`,
 * `steps_pYYYYMMDD`, `workflow_messages_pYYYYMMDD` and `workflow_streams_pYYYYMMDD` (their events, in
 * `workflow_events`, are deleted by creation day when the day is dropped). `extend` creates the days up to a week
 * ahead; `prune` drops a day's partitions whole once every workflow created that day finished more than the
 * retention ago, deletes the rows of the partitions made by the upgrade to 1.0 (`workflow_history_legacy`,
 * `steps_legacy`, `steps_before`) in batches, as retention did before, and the rate limits' starts older than the
 * retention (a day at least). On a Citus worker node (no DDL there) both do nothing: instances on the coordinator
 * keep the partitions.
 */
export class HistoryPartitions {
  private readonly tables: WorkflowTables;

  constructor(private readonly database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
  }

  /** Creates the missing daily partitions from the newest one through `daysAhead` days from today; their days. */
  async extend(daysAhead = PARTITION_DAYS_AHEAD): Promise<string[]> {
    if (this.database.citusWorkerGroup !== undefined) return [];
    return this.database.transaction(async (query) => {
      await lockSchema(query, this.database.schema);
      const [row] = await query<{ days: string[] | null }>(
        `SELECT array_agg(to_char(d AT TIME ZONE 'UTC', 'YYYY-MM-DD') ORDER BY d) AS days
         FROM generate_series(
           (SELECT max(upper) FROM (${this.boundsSql(this.tables.steps)}) AS b),
           date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + $1::int * interval '1 day',
           interval '1 day') AS d`,
        [daysAhead],
      );
      const days = row?.days ?? [];
      for (const day of days) {
        const suffix = day.replace(/-/g, '');
        const range = `FROM ('${day} 00:00:00+00') TO ('${day} 00:00:00+00'::timestamptz + interval '1 day')`;
        await query(
          `CREATE TABLE IF NOT EXISTS ${this.database.schemaSql}.workflow_history_p${suffix}
             PARTITION OF ${this.tables.history} FOR VALUES ${range}`,
        );
        await query(
          `CREATE TABLE IF NOT EXISTS ${this.database.schemaSql}.steps_p${suffix}
             PARTITION OF ${this.tables.steps} FOR VALUES ${range}`,
        );
        await query(
          `CREATE TABLE IF NOT EXISTS ${this.database.schemaSql}.workflow_messages_p${suffix}
             PARTITION OF ${this.database.schemaSql}.workflow_messages FOR VALUES ${range}`,
        );
        await query(
          `CREATE TABLE IF NOT EXISTS ${this.database.schemaSql}.workflow_streams_p${suffix}
             PARTITION OF ${this.tables.streams} FOR VALUES ${range}`,
        );
      }
      return days;
    });
  }

  /**
   * Retention: drops the days whose every workflow finished more than `retentionMs` ago (a day with a workflow still
   * queued, running, dead-lettered or holding its key in a deduplication window waits), then deletes up to `batch` rows of the upgrade's partitions that
   * finished more than `retentionMs` ago, with their steps. Returns how many days and rows went.
   */
  async prune(retentionMs: number, batch = 1000): Promise<{ days: string[]; rows: number }> {
    if (this.database.citusWorkerGroup !== undefined) return { days: [], rows: 0 };
    const days: string[] = [];
    const expired = this.database.citus
      ? await this.expiredDaysByProbe(retentionMs)
      : await this.database.query<{ name: string; lower: Date; upper: Date }>(
          `SELECT b.name, b.lower, b.upper FROM (${this.boundsSql(this.tables.history)}) AS b
       WHERE b.upper <= now() - $1::float8 * interval '1 millisecond'
         AND NOT EXISTS (SELECT 1 FROM ${this.tables.active} AS a
                         WHERE a.created_at >= b.lower AND a.created_at < b.upper)
       ORDER BY b.lower`,
          [retentionMs],
          { idempotent: true },
        );
    for (const partition of expired) {
      if (await this.dropDay(partition, retentionMs)) days.push(partition.name.replace(/^workflow_history_p/, ''));
    }
    await this.database.query(
      `DELETE FROM ${this.tables.starts} WHERE started_at < now() - $1::float8 * interval '1 millisecond'`,
      [Math.max(retentionMs, STARTS_KEPT_AT_LEAST_MS)],
      { idempotent: true },
    );
    if (this.database.citus) return { days, rows: await this.pruneLegacyById(retentionMs, batch) };
    const rows = await this.database.query(
      `WITH pruned AS (
         DELETE FROM ${this.database.schemaSql}.workflow_history_legacy WHERE ctid = ANY(ARRAY(
           SELECT ctid FROM ${this.database.schemaSql}.workflow_history_legacy AS l
           WHERE completed_at < now() - $1::float8 * interval '1 millisecond'
             AND NOT EXISTS (SELECT 1 FROM ${this.tables.active} AS a
                             WHERE a.workflow_id = l.workflow_id AND a.queue_name = l.queue_name)
           LIMIT $2 FOR UPDATE SKIP LOCKED))
         RETURNING workflow_id, queue_name, created_at
       ),
       events_pruned AS (
         DELETE FROM ${this.tables.events} AS e USING pruned AS p
         WHERE e.queue_name = p.queue_name AND e.workflow_id = p.workflow_id
       ),
       messages_pruned AS (
         DELETE FROM ${this.database.schemaSql}.workflow_messages AS m USING pruned AS p
         WHERE m.queue_name = p.queue_name AND m.workflow_id = p.workflow_id AND m.workflow_created_at = p.created_at
       ),
       streams_pruned AS (
         DELETE FROM ${this.tables.streams} AS s USING pruned AS p
         WHERE s.queue_name = p.queue_name AND s.workflow_id = p.workflow_id AND s.workflow_created_at = p.created_at
       ),
       steps_pruned AS (
         DELETE FROM ${this.tables.steps} AS s USING pruned AS p
         WHERE s.workflow_id = p.workflow_id
           AND (s.workflow_created_at IS NULL OR s.workflow_created_at = p.created_at)
       )
       SELECT workflow_id FROM pruned`,
      [retentionMs, batch],
      { idempotent: true },
    );
    return { days, rows: rows.length };
  }

  /**
   * On Citus (where a query of the catalog may not hold a correlated subquery over a distributed table): the days
   * past the retention, each then probed for an active workflow (every node, once per day and round).
   */
  private async expiredDaysByProbe(retentionMs: number): Promise<Array<{ name: string; lower: Date; upper: Date }>> {
    const past = await this.database.query<{ name: string; lower: Date; upper: Date }>(
      `SELECT b.name, b.lower, b.upper FROM (${this.boundsSql(this.tables.history)}) AS b
       WHERE b.upper <= now() - $1::float8 * interval '1 millisecond' ORDER BY b.lower`,
      [retentionMs],
      { idempotent: true },
    );
    const expired = [];
    for (const day of past) {
      const active = await this.database.query(
        `SELECT 1 FROM ${this.tables.active} WHERE created_at >= $1 AND created_at < $2 LIMIT 1`,
        [day.lower, day.upper],
        { idempotent: true },
      );
      if (active.length === 0) expired.push(day);
    }
    return expired;
  }

  /**
   * On Citus (where a `ctid` names a row within one shard only): the legacy rows past the retention by workflow ID
   * (unique in the legacy partition), then those rows and their steps, in one transaction.
   */
  private async pruneLegacyById(retentionMs: number, batch: number): Promise<number> {
    const legacy = `${this.database.schemaSql}.workflow_history_legacy`;
    return this.database.transaction(async (query: Query) => {
      const due = await query<{ workflow_id: string; created_at: Date }>(
        `SELECT workflow_id, created_at FROM ${legacy} AS l
         WHERE completed_at < now() - $1::float8 * interval '1 millisecond'
           AND NOT EXISTS (SELECT 1 FROM ${this.tables.active} AS a
                           WHERE a.workflow_id = l.workflow_id AND a.queue_name = l.queue_name)
         LIMIT $2`,
        [retentionMs, batch],
      );
      if (due.length === 0) return 0;
      const ids = due.map((row) => row.workflow_id);
      const pruned = await query(`DELETE FROM ${legacy} WHERE workflow_id = ANY($1::text[]) RETURNING workflow_id`, [
        ids,
      ]);
      await query(
        `DELETE FROM ${this.tables.steps}
         WHERE workflow_id = ANY($1::text[]) AND (workflow_created_at IS NULL OR workflow_created_at = ANY($2))`,
        [ids, due.map((row) => row.created_at)],
      );
      await query(
        `DELETE FROM ${this.tables.streams} WHERE workflow_id = ANY($1::text[]) AND workflow_created_at = ANY($2)`,
        [ids, due.map((row) => row.created_at)],
      );
      return pruned.length;
    });
  }

  /**
   * Drops one day of history, its steps, messages, streams and events, and its workflows' registrations as
   * `getEvent` waiters, unless a workflow of it finished within the retention.
   */
  private async dropDay(day: { name: string; lower: Date; upper: Date }, retentionMs: number): Promise<boolean> {
    const historyPartition = day.name;
    const stepsPartition = historyPartition.replace(/^workflow_history_p/, 'steps_p');
    const messagesPartition = historyPartition.replace(/^workflow_history_p/, 'workflow_messages_p');
    const streamsPartition = historyPartition.replace(/^workflow_history_p/, 'workflow_streams_p');
    const dropping = this.database.transaction(async (query: Query) => {
      await query(`SET LOCAL lock_timeout = ${DROP_LOCK_TIMEOUT_MS}`);
      const recent = await query(
        `SELECT 1 FROM ${this.database.schemaSql}.${historyPartition}
         WHERE completed_at >= now() - $1::float8 * interval '1 millisecond' LIMIT 1`,
        [retentionMs],
      );
      if (recent.length > 0) return false;
      await query(`DELETE FROM ${this.tables.events} WHERE workflow_created_at >= $1 AND workflow_created_at < $2`, [
        day.lower,
        day.upper,
      ]);
      await query(`DELETE FROM ${this.tables.eventWaits} WHERE waiter_created_at >= $1 AND waiter_created_at < $2`, [
        day.lower,
        day.upper,
      ]);
      await query(`DROP TABLE ${this.database.schemaSql}.${historyPartition}`);
      await query(`DROP TABLE IF EXISTS ${this.database.schemaSql}.${stepsPartition}`);
      await query(`DROP TABLE IF EXISTS ${this.database.schemaSql}.${messagesPartition}`);
      await query(`DROP TABLE IF EXISTS ${this.database.schemaSql}.${streamsPartition}`);
      return true;
    });
    try {
      return await dropping;
    } catch (error) {
      if (isLockTimeout(error)) return false;
      throw error;
    }
  }

  /** The range partitions of `parent` with their bounds (`name`, `lower`, `upper`; MINVALUE gives a null `lower`). */
  private boundsSql(parent: string): string {
    return `SELECT c.relname AS name,
              (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']+)''\\)'))[1]::timestamptz AS lower,
              (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)'))[1]::timestamptz AS upper
            FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
            WHERE i.inhparent = '${parent}'::regclass AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'`;
  }
}
