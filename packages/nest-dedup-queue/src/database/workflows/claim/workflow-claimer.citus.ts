import { hasGlobalLimits } from '../../../dedup-queue.config';
import type { QueueDatabase, TransactionQuery } from '../../connection/queue-database';
import { READY_SQL } from '../../tables/workflow-status.sql';
import { deleteReadyRowsOnCitus } from '../../tables/ready-rows.sql';
import { WorkflowTables, workflowTables } from '../../tables/workflow-tables';
import { CLAIM_KEY_SQL } from '../../versions/workflow-registrations';
import { CitusExecutorLeases } from '../../executors/executor-leases.citus';
import {
  type ClaimRequest,
  type ClaimedRow,
  type LimitCounts,
  claimUpdateSql,
  readyCandidatesSql,
  readyJoinSql,
  storedName,
} from './claimed-rows';

/** A candidate's ready row, locked with its active row (ENQUEUED). */
interface LockedReadyRow {
  workflow_id: string;
  priority: number;
  seq: string;
  status: string;
}

/**
 * The claim on Citus, in the caller's transaction, as statements Citus plans on its fast path (one table,
 * `queue_name = $1`, no CTE), where the one-server claim is one statement with CTEs (see `WorkflowClaimer`).
 */
export class CitusClaim {
  private readonly tables: WorkflowTables;
  private readonly workflows: string;
  private readonly queues: string;
  private readonly leases: CitusExecutorLeases;
  /**
   * A queue without partitions: the ready rows of queue $1 whose active rows are due and have a claim key of $2, at
   * most $3, locked `FOR UPDATE SKIP LOCKED` (a router statement: the two tables are co-located); then their active
   * rows locked the same way (`lockPicksSql`), their ready rows deleted and their update for executor $2, by IDs
   * ($3), returning `ClaimedRow`s (`updateSql`, and `countedUpdateSql` for a queue with global limits, see
   * `claimUpdateSql`).
   */
  private readonly candidatesSql: string;
  private readonly updateSql: string;
  private readonly countedUpdateSql: string;
  /**
   * A partitioned queue (see `claimPartitions`): the running workflows per partition of queue $1; the starts per
   * partition since $2 (`queue_starts`); the picks; the picks locked.
   */
  private readonly runningPerPartitionSql: string;
  private readonly startsPerPartitionSql: string;
  private readonly partitionPicksSql: string;
  private readonly lockPicksSql: string;

  constructor(database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
    this.workflows = this.tables.active;
    this.queues = `${database.schemaSql}.queues`;
    this.leases = new CitusExecutorLeases(database);
    const readyJoin = readyJoinSql(this.tables.ready, this.workflows);
    const due = `${READY_SQL} AND ${CLAIM_KEY_SQL} = ANY($2::text[])`;
    this.candidatesSql = `SELECT r.workflow_id
       FROM ${readyCandidatesSql(this.tables.ready, this.workflows, due, false)}
       WHERE r.queue_name = $1
       ORDER BY r.priority, r.seq
       LIMIT $3
       FOR UPDATE OF r SKIP LOCKED`;
    const byIds = 'w.queue_name = $1 AND w.workflow_id = ANY($3::text[])';
    this.updateSql = claimUpdateSql(this.workflows, true, '', byIds);
    this.countedUpdateSql = claimUpdateSql(this.workflows, true, '', byIds, true);
    this.runningPerPartitionSql = `SELECT partition_key, count(*)::int AS n FROM ${this.workflows}
       WHERE queue_name = $1 AND counted_running AND partition_key IS NOT NULL GROUP BY partition_key`;
    this.startsPerPartitionSql = `SELECT partition_key, count(*)::int AS n FROM ${this.tables.starts}
       WHERE queue_name = $1 AND partition_key IS NOT NULL AND started_at > $2::timestamptz GROUP BY partition_key`;
    this.partitionPicksSql = `SELECT r.workflow_id,
         row_number() OVER turns <= CASE WHEN r.partition_key IS NULL THEN $3::int
           ELSE coalesce(($5::int[])[array_position($4::text[], r.partition_key)], $6::int) END AS admissible
       FROM ${readyCandidatesSql(this.tables.ready, this.workflows, due, false)}
       WHERE r.queue_name = $1 AND (r.partition_key IS NULL OR r.partition_key <> ALL($7::text[]))
       WINDOW turns AS (PARTITION BY r.partition_key ORDER BY r.priority, r.seq)
       ORDER BY 2 DESC, row_number() OVER turns, r.priority, r.seq
       LIMIT $3`;
    this.lockPicksSql = `SELECT r.workflow_id, r.priority, r.seq, w.status FROM ${readyJoin}
       WHERE r.queue_name = $1 AND w.queue_name = $1 AND w.workflow_id = ANY($2::text[]) AND ${READY_SQL}
       FOR UPDATE OF r, w SKIP LOCKED`;
  }

  /**
   * On Citus, in a transaction: the executor's lease in the queue locked on the queue's node (`FOR KEY SHARE`, so that
   * recovery cannot delete it until the claim commits; none or expired, no claim: see `CitusExecutorLeases`), then the
   * claim there. A queue without partitions is claimed by statements on Citus's fast path: its pause flag (unless
   * the caller locked the queue's row and read it), the candidates' ready rows locked, then their active rows, then
   * their update (see `candidatesSql`); a partitioned one by `claimPartitions`.
   */
  async claim(
    query: TransactionQuery,
    request: ClaimRequest,
    limit: number,
    partitioned: boolean,
  ): Promise<ClaimedRow[]> {
    const alive = await query(this.leases.lockSql, [storedName(request), request.executorId]);
    if (alive.length === 0) return [];
    if (partitioned) return this.claimPartitions(query, request, limit);
    if (!hasGlobalLimits(request.queue)) {
      const [queue] = await query<{ paused: boolean }>(`SELECT paused FROM ${this.queues} WHERE queue_name = $1`, [
        request.queue.name,
      ]);
      if (queue?.paused) return [];
    }
    const picks = await query<{ workflow_id: string }>(this.candidatesSql, [
      storedName(request),
      request.claimKeys,
      limit,
    ]);
    if (picks.length === 0) return [];
    const ids = picks.map((pick) => pick.workflow_id);
    return this.take(query, request, await query<LockedReadyRow>(this.lockPicksSql, [storedName(request), ids]));
  }

  /** Deletes the ready rows of the locked `candidates` and claims their active rows. */
  private async take(
    query: TransactionQuery,
    request: ClaimRequest,
    candidates: LockedReadyRow[],
  ): Promise<ClaimedRow[]> {
    if (candidates.length === 0) return [];
    await deleteReadyRowsOnCitus(query, this.tables.ready, storedName(request), candidates);
    return query<ClaimedRow>(hasGlobalLimits(request.queue) ? this.countedUpdateSql : this.updateSql, [
      storedName(request),
      request.executorId,
      candidates.map((row) => row.workflow_id),
    ]);
  }

  /**
   * On Citus, a partitioned queue's claim (the caller holds the queue's row lock, which every claim of the queue takes
   * first, and the lease row) as statements on Citus's fast path, in place of `claimSql(true)`, whose CTEs and
   * `LATERAL` go through the full planner: each partition's room (its per-partition concurrency less its running
   * workflows, its per-partition rate limit less its starts in the window, counted up to the coordinator's `now()`,
   * as `counts` does), each count only when its limit is set; the picks, read without a lock: the due rows
   * numbered per partition by priority and age (their turn), the first `limit` of those within their partition's room
   * by turn, priority and age (rows without a partition key have a room of `limit`); then those locked
   * `FOR UPDATE SKIP LOCKED` (the lock rechecks that each is still due) and claimed as a queue without partitions is.
   */
  private async claimPartitions(query: TransactionQuery, request: ClaimRequest, limit: number): Promise<ClaimedRow[]> {
    const { queue } = request;
    const perPartitionRate = queue.rateLimit?.perPartition ? queue.rateLimit : undefined;
    const anyRoom = Math.min(limit, queue.partitionConcurrency ?? limit, perPartitionRate?.limit ?? limit);
    const rooms = new Map<string, number>();
    const lower = (counts: Array<{ partition_key: string; n: number }>, bound: number) => {
      for (const { partition_key: key, n } of counts) rooms.set(key, Math.min(rooms.get(key) ?? anyRoom, bound - n));
    };
    if (queue.partitionConcurrency !== undefined) {
      lower(await query(this.runningPerPartitionSql, [queue.name]), queue.partitionConcurrency);
    }
    if (perPartitionRate && perPartitionRate.periodMs > 0) {
      const [{ now }] = await query<{ now: Date }>('SELECT now() AS now');
      const since = new Date(now.getTime() - perPartitionRate.periodMs);
      lower(await query(this.startsPerPartitionSql, [queue.name, since]), perPartitionRate.limit);
    }
    const open = [...rooms].filter(([, room]) => room > 0);
    const full = [...rooms].filter(([, room]) => room <= 0).map(([key]) => key);
    const picks = await query<{ workflow_id: string; admissible: boolean }>(this.partitionPicksSql, [
      queue.name,
      request.claimKeys,
      limit,
      open.map(([key]) => key),
      open.map(([, room]) => room),
      Math.max(0, anyRoom),
      full,
    ]);
    const ids = picks.filter((pick) => pick.admissible).map((pick) => pick.workflow_id);
    if (ids.length === 0) return [];
    return this.take(query, request, await query<LockedReadyRow>(this.lockPicksSql, [queue.name, ids]));
  }

  /**
   * On Citus, the counts of `allowedStarts`, each a statement on Citus's fast path and only when its limit is set (one
   * statement that reads both tables is planned by Citus's full planner): the queue's running workflows (`concurrency`),
   * and its starts within the rate window (`periodMs`) with when the first of them leaves it. The caller holds the
   * queue's row lock, under which no other claim changes either count. A router `SELECT`'s `now()` is the node's,
   * whose part of the transaction began later (after the lease and queue locks), while this transaction's claims are
   * stamped with the coordinator's `now()`: the window is counted up to the coordinator's, read by a statement that
   * names no table, so that it ends where the stamps say.
   */
  async counts(
    query: TransactionQuery,
    queue: string,
    concurrency: boolean,
    periodMs: number | undefined,
  ): Promise<LimitCounts> {
    const counts: LimitCounts = { running: 0, recent: 0, frees_in_ms: null };
    if (concurrency) {
      const [{ n }] = await query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${this.workflows} WHERE queue_name = $1 AND counted_running`,
        [queue],
      );
      counts.running = n;
    }
    if (periodMs !== undefined && periodMs > 0) {
      const [{ now }] = await query<{ now: Date }>('SELECT now() AS now');
      const [recent] = await query<{ recent: number; frees_in_ms: number | null }>(
        `SELECT count(*)::int AS recent,
           (extract(epoch FROM min(started_at) + $2::float8 * interval '1 millisecond' - clock_timestamp()) * 1000)::float8
             AS frees_in_ms
         FROM ${this.tables.starts}
         WHERE queue_name = $1 AND started_at > $3::timestamptz - $2::float8 * interval '1 millisecond'`,
        [queue, periodMs, now],
      );
      Object.assign(counts, recent);
    }
    return counts;
  }

  /**
   * On Citus, `count` starts of queue $1 into `queue_starts` as a router insert (`INSERT … VALUES`), the partition
   * keys $2…, stamped with the transaction's `now()`, which the coordinator evaluates, as it did for the claim's
   * `started_at` in the same transaction; returning their start times.
   */
  recordStartsSql(count: number): string {
    return `INSERT INTO ${this.tables.starts} (queue_name, started_at, partition_key)
       VALUES ${Array.from({ length: count }, (_, i) => `($1, now(), $${i + 2})`).join(', ')}
       RETURNING started_at`;
  }
}
