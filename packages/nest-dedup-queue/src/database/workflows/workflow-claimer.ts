import { ResolvedQueue, hasGlobalLimits, isPartitioned } from '../../dedup-queue.config';
import type { QueueDatabase, TransactionQuery } from '../connection/queue-database';
import { READY_SQL, STATUS_SQL } from '../tables/workflow-status.sql';
import { WorkflowTables, workflowTables } from '../tables/workflow-tables';
import { nowPlusMsSql, startTimeSql } from '../connection/time.sql';
import { CLAIM_KEY_SQL } from '../versions/workflow-registrations';

export interface ClaimedWorkflow {
  workflowId: string;
  /** The name its row is stored under: its queue's, or on Citus its shard's (see `storedQueueNames`). */
  storedQueueName: string;
  workflowName: string;
  /** The version it was enqueued with. */
  version: number;
  /** A fork (`QueueService.fork`): its first run already has recorded positions to replay. */
  forked: boolean;
  inputsJson: string;
  /** How many times it has been claimed, this claim included. */
  attempts: number;
  failedAttempts: number;
  maxAttempts: number;
  maxRecoveryAttempts: number;
  /** Milliseconds left until its timeout, by the database's clock; null without a timeout. */
  remainingMs: number | null;
  /** Its deadline, by the database's clock (its own timeout's, or the parent's it inherited); null without one. */
  deadlineAt: Date | null;
  /** The W3C `traceparent` stored by the enqueue, if it was traced. */
  traceContext: string | null;
  /** Seconds from when it became due (enqueued, delayed, or waiting to retry) to this start; null after a recovery. */
  waitSeconds: number | null;
}

export interface ClaimRequest {
  /** The queue, with the limits that apply now. */
  queue: ResolvedQueue;
  /** The name of the rows to claim: the queue's (when left out), or on Citus a shard's (see `storedQueueNames`). */
  storedQueueName?: string;
  executorId: string;
  /** This process's free slots. */
  limit: number;
  /** The names and versions this process runs, as `claimKey`s: only those are claimed. */
  claimKeys: string[];
}

/**
 * A claim to run in the statement that records outcomes (see `WorkflowOutcomeStore.recordOutcomes`): its CTEs
 * (`claimable`, then `claimed`, the UPDATE returning the claimed rows) with parameters numbered from `firstParam`.
 */
export interface AttachedClaim {
  ctes(firstParam: number): string;
  params: unknown[];
  /**
   * On Citus, in place of `ctes`: the claim as router statements of its own in the caller's transaction (see
   * `claimOnCitus`); its rows as JSON text, for `read`.
   */
  runInTransaction(query: TransactionQuery): Promise<string[]>;
  /** The workflows claimed, from the rows of `claimed` as JSON. */
  read(rowsJson: string[]): ClaimedWorkflow[];
}

export interface ClaimResult {
  workflows: ClaimedWorkflow[];
  /** When a rate limit stopped the claim: how long until a start slot frees. */
  retryInMs?: number;
}

interface ClaimedRow {
  workflow_id: string;
  workflow_name: string;
  workflow_version: number;
  forked: boolean;
  inputs: string;
  priority: number;
  seq: string;
  attempts: number;
  failed_attempts: number;
  max_attempts: number;
  max_recovery_attempts: number;
  remaining_ms: number | null;
  /**
   * The deadline in milliseconds since the epoch (a number, as the attached claim's JSON carries it). NOTE: from an
   * interval, whose `extract` is IMMUTABLE, as Citus wants in a RETURNING (a timestamp's is only STABLE).
   */
  deadline_ms: number | null;
  trace_context: string | null;
  wait_seconds: number | null;
  /** On Citus only: its partition key, for the record of its start (`recordStartsOnCitusSql`). */
  partition_key?: string | null;
}

const LOCK_TIMEOUT = '5s';

/** What `allowedStarts` counts: running workflows, starts in the rate window, and when the first of those leaves it. */
interface LimitCounts {
  running: number;
  recent: number;
  frees_in_ms: number | null;
}

/**
 * A CTE for a claim that runs as a statement of its own: its commit does not wait for the WAL to reach the disk
 * (`synchronous_commit = off` for its transaction only, as `SET LOCAL`). Nobody waits on a claim: lost in a server
 * crash, its workflows are simply claimed again, and whatever the run then records (a step, its outcome) commits
 * synchronously, which flushes the claim with it. The UPDATE names it, so that it is evaluated, once.
 */
const COMMIT_WITHOUT_FLUSH_CTE = `commit_without_flush AS (SELECT set_config('synchronous_commit', 'off', true))`;

/**
 * Claims due ENQUEUED workflows for one executor: moves them to PENDING under it, highest priority and oldest
 * first, only while its lease row exists, starting their timeout clocks. A queue without global limits is claimed
 * in one statement with SKIP LOCKED. A queue with a global concurrency, partitions or a rate limit is claimed in a
 * transaction that first locks the queue's row, so that the counts it reads are exact while it claims; partitions
 * are served round-robin (each partition's first due workflow before any partition's second). Both skip rows locked
 * by others, read the pause flag in the database, and time starts by `clock_timestamp()`, after any lock wait.
 */
export class WorkflowClaimer {
  private readonly tables: WorkflowTables;
  private readonly workflows: string;
  private readonly queues: string;
  private readonly executors: string;
  /**
   * On Citus, the claim of a queue without partitions as two statements that Citus plans on its fast path (one table,
   * `queue_name = $1`, no CTE): the due rows of queue $1 whose claim key is one of $2, at most $3, locked
   * `FOR UPDATE SKIP LOCKED`; then their update for executor $2, by IDs ($3), returning `ClaimedRow`s.
   */
  private readonly candidatesOnCitusSql: string;
  private readonly updateOnCitusSql: string;
  /**
   * On Citus, a partitioned queue's claim as statements on Citus's fast path (see `claimPartitionsOnCitus`): the
   * running workflows per partition of queue $1; the starts per partition since $2 (`queue_starts`); the picks;
   * the picks locked.
   */
  private readonly runningPerPartitionOnCitusSql: string;
  private readonly startsPerPartitionOnCitusSql: string;
  private readonly partitionPicksOnCitusSql: string;
  private readonly lockPicksOnCitusSql: string;
  /** The starts of the claimed workflows $2 of queue $1 into `queue_starts`, returning their start times. */
  private readonly recordStartsSql: string;
  /** The starts of queue $1 before $2, which no window counts. */
  private readonly pruneStartsSql: string;

  constructor(private readonly database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
    this.workflows = this.tables.active;
    this.queues = `${database.schemaSql}.queues`;
    this.executors = `${database.schemaSql}.executors`;
    this.candidatesOnCitusSql = `SELECT workflow_id FROM ${this.workflows}
       WHERE queue_name = $1 AND ${READY_SQL} AND ${CLAIM_KEY_SQL} = ANY($2::text[])
       ORDER BY priority, seq
       LIMIT $3
       FOR UPDATE SKIP LOCKED`;
    this.updateOnCitusSql = this.updateSql('', 'w.queue_name = $1 AND w.workflow_id = ANY($3::text[])');
    this.runningPerPartitionOnCitusSql = `SELECT partition_key, count(*)::int AS n FROM ${this.workflows}
       WHERE queue_name = $1 AND status = ${STATUS_SQL.PENDING} AND partition_key IS NOT NULL GROUP BY partition_key`;
    this.startsPerPartitionOnCitusSql = `SELECT partition_key, count(*)::int AS n FROM ${this.tables.starts}
       WHERE queue_name = $1 AND partition_key IS NOT NULL AND started_at > $2::timestamptz GROUP BY partition_key`;
    this.partitionPicksOnCitusSql = `SELECT workflow_id,
         row_number() OVER turns <= CASE WHEN partition_key IS NULL THEN $3::int
           ELSE coalesce(($5::int[])[array_position($4::text[], partition_key)], $6::int) END AS admissible
       FROM ${this.workflows}
       WHERE queue_name = $1 AND ${READY_SQL} AND ${CLAIM_KEY_SQL} = ANY($2::text[])
         AND (partition_key IS NULL OR partition_key <> ALL($7::text[]))
       WINDOW turns AS (PARTITION BY partition_key ORDER BY priority, seq)
       ORDER BY 2 DESC, row_number() OVER turns, priority, seq
       LIMIT $3`;
    this.lockPicksOnCitusSql = `SELECT workflow_id FROM ${this.workflows}
       WHERE queue_name = $1 AND workflow_id = ANY($2::text[]) AND ${READY_SQL}
       FOR UPDATE SKIP LOCKED`;
    this.recordStartsSql = `INSERT INTO ${this.tables.starts} (queue_name, started_at, partition_key)
       SELECT queue_name, started_at, partition_key FROM ${this.workflows}
       WHERE queue_name = $1 AND workflow_id = ANY($2::text[])
       RETURNING started_at`;
    this.pruneStartsSql = `DELETE FROM ${this.tables.starts} WHERE queue_name = $1 AND started_at < $2::timestamptz`;
  }

  async claim(request: ClaimRequest): Promise<ClaimResult> {
    const partitioned = isPartitioned(request.queue);
    if (!hasGlobalLimits(request.queue) && this.database.citus) {
      return this.database.transaction(async (query) => ({
        workflows: toClaimed(await this.claimOnCitus(query, request, request.limit, false), storedName(request)),
      }));
    }
    if (!hasGlobalLimits(request.queue)) {
      const sql = this.claimSql(false, true);
      return {
        workflows: toClaimed(
          await this.database.query<ClaimedRow>(sql, this.params(request, request.limit), { prepared: true }),
          storedName(request),
        ),
      };
    }
    return this.database.transaction(async (query) => {
      await query(`SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'; SET LOCAL synchronous_commit = off`);
      const [queue] = await query<{ paused: boolean }>(
        `SELECT paused FROM ${this.queues} WHERE queue_name = $1 FOR UPDATE`,
        [request.queue.name],
      );
      if (queue?.paused) return { workflows: [] };
      const { limit, retryInMs } = await this.allowedStarts(query, request);
      if (limit <= 0) return { workflows: [], retryInMs };
      const rows = this.database.citus
        ? await this.claimOnCitus(query, request, limit, partitioned)
        : await query<ClaimedRow>(this.claimSql(partitioned), this.params(request, limit), { prepared: true });
      if (request.queue.rateLimit && rows.length > 0) await this.recordStarts(query, request, rows);
      return { workflows: toClaimed(rows, storedName(request)), retryInMs };
    });
  }

  /** The claim of a queue without global limits, to attach to another statement. */
  attachable(request: ClaimRequest): AttachedClaim {
    const { candidates, update } = this.claimParts(false);
    const sql = `${candidates.replace(/^\s*WITH /, '')}, claimed AS (${update})`;
    return {
      ctes: (firstParam) => sql.replace(/\$(\d+)/g, (_, n: string) => `$${Number(n) + firstParam - 1}`),
      params: this.params(request, request.limit),
      runInTransaction: async (query) =>
        (await this.claimOnCitus(query, request, request.limit, false)).map((row) => JSON.stringify(row)),
      read: (rowsJson) =>
        toClaimed(
          rowsJson.map((json) => JSON.parse(json) as ClaimedRow),
          storedName(request),
        ),
    };
  }

  /**
   * On Citus, in a transaction: the executor's lease row locked (`FOR KEY SHARE`, so that it cannot be deleted until the
   * claim commits; none, no claim), then the claim on the queue's node. The executors table is on the coordinator:
   * named in the claim, its look-up and the claim's candidates would be planned as subplans whose results pass through
   * the coordinator. A queue without partitions is claimed by statements on Citus's fast path: its pause flag (unless
   * the caller locked the queue's row and read it), the candidates locked, then their update (see
   * `candidatesOnCitusSql`); a partitioned one by the router statement of `claimSql`.
   */
  private async claimOnCitus(
    query: TransactionQuery,
    request: ClaimRequest,
    limit: number,
    partitioned: boolean,
  ): Promise<ClaimedRow[]> {
    const alive = await query(`SELECT 1 FROM ${this.executors} WHERE executor_id = $1 FOR KEY SHARE`, [
      request.executorId,
    ]);
    if (alive.length === 0) return [];
    if (partitioned) return this.claimPartitionsOnCitus(query, request, limit);
    if (!hasGlobalLimits(request.queue)) {
      const [queue] = await query<{ paused: boolean }>(`SELECT paused FROM ${this.queues} WHERE queue_name = $1`, [
        request.queue.name,
      ]);
      if (queue?.paused) return [];
    }
    const candidates = await query<{ workflow_id: string }>(this.candidatesOnCitusSql, [
      storedName(request),
      request.claimKeys,
      limit,
    ]);
    if (candidates.length === 0) return [];
    return query<ClaimedRow>(this.updateOnCitusSql, [
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
   * as `countsOnCitus` does), each count only when its limit is set; the picks, read without a lock: the due rows
   * numbered per partition by priority and age (their turn), the first `limit` of those within their partition's room
   * by turn, priority and age (rows without a partition key have a room of `limit`); then those locked
   * `FOR UPDATE SKIP LOCKED` (the lock rechecks that each is still due) and claimed as a queue without partitions is.
   */
  private async claimPartitionsOnCitus(
    query: TransactionQuery,
    request: ClaimRequest,
    limit: number,
  ): Promise<ClaimedRow[]> {
    const { queue } = request;
    const perPartitionRate = queue.rateLimit?.perPartition ? queue.rateLimit : undefined;
    const anyRoom = Math.min(limit, queue.partitionConcurrency ?? limit, perPartitionRate?.limit ?? limit);
    const rooms = new Map<string, number>();
    const lower = (counts: Array<{ partition_key: string; n: number }>, bound: number) => {
      for (const { partition_key: key, n } of counts) rooms.set(key, Math.min(rooms.get(key) ?? anyRoom, bound - n));
    };
    if (queue.partitionConcurrency !== undefined) {
      lower(await query(this.runningPerPartitionOnCitusSql, [queue.name]), queue.partitionConcurrency);
    }
    if (perPartitionRate && perPartitionRate.periodMs > 0) {
      const [{ now }] = await query<{ now: Date }>('SELECT now() AS now');
      const since = new Date(now.getTime() - perPartitionRate.periodMs);
      lower(await query(this.startsPerPartitionOnCitusSql, [queue.name, since]), perPartitionRate.limit);
    }
    const open = [...rooms].filter(([, room]) => room > 0);
    const full = [...rooms].filter(([, room]) => room <= 0).map(([key]) => key);
    const picks = await query<{ workflow_id: string; admissible: boolean }>(this.partitionPicksOnCitusSql, [
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
    const locked = await query<{ workflow_id: string }>(this.lockPicksOnCitusSql, [queue.name, ids]);
    if (locked.length === 0) return [];
    return query<ClaimedRow>(this.updateOnCitusSql, [
      queue.name,
      request.executorId,
      locked.map((row) => row.workflow_id),
    ]);
  }

  private async allowedStarts(
    query: TransactionQuery,
    request: ClaimRequest,
  ): Promise<{ limit: number; retryInMs?: number }> {
    const { concurrency, rateLimit } = request.queue;
    const queueWideRate = rateLimit && !rateLimit.perPartition ? rateLimit : undefined;
    if (concurrency === undefined && !queueWideRate) return { limit: request.limit };
    const counts = this.database.citus
      ? await this.countsOnCitus(query, request.queue.name, concurrency !== undefined, queueWideRate?.periodMs)
      : (
          await query<LimitCounts>(
            `SELECT
               (SELECT count(*)::int FROM ${this.workflows}
                WHERE queue_name = $1 AND status = ${STATUS_SQL.PENDING}) AS running,
               count(*)::int AS recent,
               (extract(epoch FROM min(started_at) + $2::float8 * interval '1 millisecond' - clock_timestamp()) * 1000)::float8
                 AS frees_in_ms
             FROM ${this.tables.starts}
             WHERE queue_name = $1 AND $2::float8 > 0
               AND started_at > ${startTimeSql(false)} - $2::float8 * interval '1 millisecond'`,
            [request.queue.name, queueWideRate?.periodMs ?? 0],
            { prepared: true },
          )
        )[0];
    let limit = request.limit;
    if (concurrency !== undefined) limit = Math.min(limit, concurrency - counts.running);
    if (queueWideRate) {
      const rateRoom = queueWideRate.limit - counts.recent;
      if (rateRoom < limit) {
        limit = rateRoom;
        if (limit <= 0) return { limit, retryInMs: Math.max(1, counts.frees_in_ms ?? queueWideRate.periodMs) };
      }
    }
    return { limit };
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
  private async countsOnCitus(
    query: TransactionQuery,
    queue: string,
    concurrency: boolean,
    periodMs: number | undefined,
  ): Promise<LimitCounts> {
    const counts: LimitCounts = { running: 0, recent: 0, frees_in_ms: null };
    if (concurrency) {
      const [{ n }] = await query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${this.workflows} WHERE queue_name = $1 AND status = ${STATUS_SQL.PENDING}`,
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
   * Records the starts of a claim in a rate-limited queue in `queue_starts`, in the claim's transaction (under the
   * queue's lock), and deletes the queue's starts that no window can count any more: older than the first of these
   * starts by more than the period (the later claims' windows end after it). On Citus a router insert from the
   * claimed rows' partition keys (`recordStartsOnCitusSql`) and a fast-path `DELETE`.
   */
  private async recordStarts(query: TransactionQuery, request: ClaimRequest, rows: ClaimedRow[]): Promise<void> {
    const starts = this.database.citus
      ? await query<{ started_at: Date }>(this.recordStartsOnCitusSql(rows.length), [
          request.queue.name,
          ...rows.map((row) => row.partition_key ?? null),
        ])
      : await query<{ started_at: Date }>(this.recordStartsSql, [
          request.queue.name,
          rows.map((row) => row.workflow_id),
        ]);
    const first = Math.min(...starts.map((start) => start.started_at.getTime()));
    await query(this.pruneStartsSql, [
      request.queue.name,
      new Date(first - (request.queue.rateLimit?.periodMs ?? 0) - 1),
    ]);
  }

  /**
   * On Citus, `count` starts of queue $1 into `queue_starts` as a router insert (`INSERT … VALUES`), the partition
   * keys $2…, stamped with the transaction's `now()`, which the coordinator evaluates, as it did for the claim's
   * `started_at` in the same transaction; returning their start times.
   */
  private recordStartsOnCitusSql(count: number): string {
    return `INSERT INTO ${this.tables.starts} (queue_name, started_at, partition_key)
       VALUES ${Array.from({ length: count }, (_, i) => `($1, now(), $${i + 2})`).join(', ')}
       RETURNING started_at`;
  }

  private params(request: ClaimRequest, limit: number): unknown[] {
    const { queue } = request;
    const params: unknown[] = [storedName(request), request.executorId, request.claimKeys, limit];
    if (isPartitioned(queue)) {
      const perPartitionRate = queue.rateLimit?.perPartition ? queue.rateLimit : undefined;
      params.push(queue.partitionConcurrency ?? null, perPartitionRate?.limit ?? null, perPartitionRate?.periodMs ?? 0);
    }
    return params;
  }

  /**
   * $1 queue, $2 executor, $3 the claim keys of the names and versions this process runs, $4 how many; partitioned: $5 per-partition concurrency,
   * $6 per-partition rate limit and $7 its period (null/0 when unset).
   *
   * NOTE: the UPDATE joins the locked candidates by primary key only. A `w.status = 'ENQUEUED'` there would be
   * redundant (the lock rechecked it and holds it) and lets the planner scan `workflows_ready` for every candidate
   * when statistics say the queue is empty (ANALYZE ran on a drained table): 400 ms instead of 1 ms per claim.
   */
  private claimSql(partitioned: boolean, withoutFlush = false): string {
    const { candidates, update } = this.claimParts(partitioned, withoutFlush);
    return `${candidates}\n${update}`;
  }

  /** `withoutFlush`: the claim is its statement's whole transaction, whose commit need not wait for the disk. */
  private claimParts(partitioned: boolean, withoutFlush = false): { candidates: string; update: string } {
    const citus = this.database.citus;
    const due = `${READY_SQL} AND ${CLAIM_KEY_SQL} = ANY($3::text[])`;
    // On Citus a partitioned queue is claimed by `claimPartitionsOnCitus`.
    const partitions = `WITH RECURSIVE partitions AS (
           (SELECT partition_key FROM ${this.workflows}
            WHERE queue_name = $1 AND status = ${STATUS_SQL.ENQUEUED} AND partition_key IS NOT NULL
            ORDER BY partition_key LIMIT 1)
           UNION ALL
           SELECT (SELECT w.partition_key FROM ${this.workflows} AS w
                   WHERE w.queue_name = $1 AND w.status = ${STATUS_SQL.ENQUEUED} AND w.partition_key > p.partition_key
                   ORDER BY w.partition_key LIMIT 1)
           FROM partitions AS p WHERE p.partition_key IS NOT NULL
         ),`;
    const candidates = partitioned
      ? `${partitions}
         running AS (
           SELECT partition_key, count(*)::int AS n FROM ${this.workflows}
           WHERE queue_name = $1 AND status = ${STATUS_SQL.PENDING} AND partition_key IS NOT NULL GROUP BY partition_key
         ),
         recent AS (
           SELECT partition_key, count(*)::int AS n
           FROM ${this.tables.starts}
           WHERE queue_name = $1 AND $7::float8 > 0 AND partition_key IS NOT NULL
             AND started_at > ${startTimeSql(citus)} - $7::float8 * interval '1 millisecond'
           GROUP BY partition_key
         ),
         picks AS (
           SELECT c.workflow_id, c.priority, c.seq,
                  row_number() OVER (PARTITION BY p.partition_key ORDER BY c.priority, c.seq) AS turn
           FROM partitions AS p
           CROSS JOIN LATERAL (
             SELECT workflow_id, priority, seq
             FROM ${this.workflows}
             WHERE queue_name = $1 AND partition_key = p.partition_key AND ${due}
             ORDER BY priority, seq
             LIMIT GREATEST(0, LEAST($4,
               coalesce($5::int - coalesce((SELECT n FROM running AS r WHERE r.partition_key = p.partition_key), 0), $4),
               coalesce($6::int - coalesce((SELECT n FROM recent AS r WHERE r.partition_key = p.partition_key), 0), $4)))
             FOR UPDATE SKIP LOCKED
           ) AS c
           WHERE p.partition_key IS NOT NULL
           UNION ALL
           SELECT workflow_id, priority, seq, row_number() OVER (ORDER BY priority, seq)
           FROM (SELECT workflow_id, priority, seq FROM ${this.workflows}
                 WHERE queue_name = $1 AND partition_key IS NULL AND ${due}
                 ORDER BY priority, seq LIMIT $4
                 FOR UPDATE SKIP LOCKED) AS unpartitioned
         ),
         claimable AS (SELECT workflow_id FROM picks ORDER BY turn, priority, seq LIMIT $4)`
      : `WITH claimable AS (
           SELECT workflow_id FROM ${this.workflows}
           WHERE queue_name = $1 AND ${due}
             AND NOT EXISTS (SELECT 1 FROM ${this.queues} WHERE queue_name = $1 AND paused)
           ORDER BY priority, seq
           LIMIT $4
           FOR UPDATE SKIP LOCKED
         )${withoutFlush ? `, ${COMMIT_WITHOUT_FLUSH_CTE}` : ''}`;
    const update = this.updateSql(
      'FROM claimable',
      `w.queue_name = $1 AND w.workflow_id = claimable.workflow_id${
        citus ? '' : `\n        AND EXISTS (SELECT 1 FROM ${this.executors} WHERE executor_id = $2)`
      }${withoutFlush ? '\n        AND EXISTS (SELECT 1 FROM commit_without_flush)' : ''}`,
    );
    return { candidates, update };
  }

  /**
   * The UPDATE that claims the active rows `w` (joined to `from`, matching `where`) for executor $2, returning
   * `ClaimedRow`s.
   */
  private updateSql(from: string, where: string): string {
    const citus = this.database.citus;
    return `
      UPDATE ${this.workflows} AS w
      SET status = ${STATUS_SQL.PENDING}, executor_id = $2, attempts = w.attempts + 1,
          started_at = ${startTimeSql(citus)}, updated_at = now(),
          deadline_at = ${
            citus
              ? // NOTE: a later deadline is never earlier than the first one, so least() keeps the first (no COALESCE on Citus).
                `least(w.deadline_at, ${nowPlusMsSql(true, 'w.timeout_ms')})`
              : `coalesce(w.deadline_at, now() + w.timeout_ms * interval '1 millisecond')`
          }
      ${from}
      WHERE ${where}
      RETURNING w.workflow_id, w.workflow_name, w.workflow_version, w.forked_from IS NOT NULL AS forked,
                w.inputs::text AS inputs, w.priority, w.seq,
                w.attempts, w.failed_attempts, w.max_attempts, w.max_recovery_attempts,
                (extract(epoch FROM w.deadline_at - ${citus ? 'w.started_at' : 'now()'}) * 1000)::float8 AS remaining_ms,
                (extract(epoch FROM w.deadline_at - timestamptz 'epoch') * 1000)::float8 AS deadline_ms, w.trace_context,
                CASE WHEN w.attempts = w.failed_attempts + 1
                     THEN extract(epoch FROM w.started_at - greatest(w.created_at, w.not_before))::float8 END
                  AS wait_seconds${citus ? ', w.partition_key' : ''}`;
  }
}

/** The workflows of an attached claim, from the JSON text of its `claimed` rows. */
/** The name the claimed rows are stored under. */
function storedName(request: ClaimRequest): string {
  return request.storedQueueName ?? request.queue.name;
}

function toClaimed(rows: ClaimedRow[], storedQueueName: string): ClaimedWorkflow[] {
  return rows
    .sort((a, b) => a.priority - b.priority || Number(BigInt(a.seq) - BigInt(b.seq)))
    .map((row) => ({
      workflowId: row.workflow_id,
      storedQueueName,
      workflowName: row.workflow_name,
      version: row.workflow_version,
      forked: row.forked,
      inputsJson: row.inputs,
      attempts: row.attempts,
      failedAttempts: row.failed_attempts,
      maxAttempts: row.max_attempts,
      maxRecoveryAttempts: row.max_recovery_attempts,
      remainingMs: row.remaining_ms,
      deadlineAt: row.deadline_ms === null ? null : new Date(row.deadline_ms),
      traceContext: row.trace_context,
      waitSeconds: row.wait_seconds,
    }));
}
