import { hasGlobalLimits, isPartitioned } from '../../../dedup-queue.config';
import type { QueueDatabase, TransactionQuery } from '../../connection/queue-database';
import { READY_SQL } from '../../tables/workflow-status.sql';
import { deleteReadyRowsSql } from '../../tables/ready-rows.sql';
import { WorkflowTables, workflowTables } from '../../tables/workflow-tables';
import { startTimeSql } from '../../connection/time.sql';
import { CLAIM_KEY_SQL } from '../../versions/workflow-registrations';
import {
  type ClaimRequest,
  type ClaimedRow,
  type ClaimedWorkflow,
  type LimitCounts,
  claimUpdateSql,
  readyCandidatesSql,
  storedName,
  toClaimed,
} from './claimed-rows';
import { CitusClaim } from './workflow-claimer.citus';

/**
 * A claim to run in the statement that records outcomes (see `WorkflowOutcomeStore.recordOutcomes`): its CTEs
 * (`claimable`, then `claimed`, the UPDATE returning the claimed rows) with parameters numbered from `firstParam`.
 */
export interface AttachedClaim {
  ctes(firstParam: number): string;
  params: unknown[];
  /**
   * On Citus, in place of `ctes`: the claim as router statements of its own in the caller's transaction (see
   * `CitusClaim.claim`); its rows as JSON text, for `read`.
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

const LOCK_TIMEOUT = '5s';

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
  /** The starts of the claimed workflows $2 of queue $1 into `queue_starts`, returning their start times. */
  private readonly recordStartsSql: string;
  /** The starts of queue $1 before $2, which no window counts. */
  private readonly pruneStartsSql: string;
  private readonly citus: CitusClaim;

  constructor(private readonly database: QueueDatabase) {
    this.tables = workflowTables(database.schemaSql);
    this.workflows = this.tables.active;
    this.queues = `${database.schemaSql}.queues`;
    this.executors = `${database.schemaSql}.executors`;
    this.citus = new CitusClaim(database);
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
        workflows: toClaimed(await this.citus.claim(query, request, request.limit, false), storedName(request)),
      }));
    }
    if (!hasGlobalLimits(request.queue)) {
      const sql = this.claimSql(false, request.limit, true);
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
        ? await this.citus.claim(query, request, limit, partitioned)
        : await query<ClaimedRow>(this.claimSql(partitioned, limit, false, true), this.params(request, limit), {
            prepared: true,
          });
      if (request.queue.rateLimit && rows.length > 0) await this.recordStarts(query, request, rows);
      return { workflows: toClaimed(rows, storedName(request)), retryInMs };
    });
  }

  /** The claim of a queue without global limits, to attach to another statement. */
  attachable(request: ClaimRequest): AttachedClaim {
    const { candidates, update } = this.claimParts(false, request.limit);
    const sql = `${candidates.replace(/^\s*WITH /, '')}, claimed AS (${update})`;
    return {
      ctes: (firstParam) => sql.replace(/\$(\d+)/g, (_, n: string) => `$${Number(n) + firstParam - 1}`),
      params: this.params(request, request.limit),
      runInTransaction: async (query) =>
        (await this.citus.claim(query, request, request.limit, false)).map((row) => JSON.stringify(row)),
      read: (rowsJson) =>
        toClaimed(
          rowsJson.map((json) => JSON.parse(json) as ClaimedRow),
          storedName(request),
        ),
    };
  }

  private async allowedStarts(
    query: TransactionQuery,
    request: ClaimRequest,
  ): Promise<{ limit: number; retryInMs?: number }> {
    const { concurrency, rateLimit } = request.queue;
    const queueWideRate = rateLimit && !rateLimit.perPartition ? rateLimit : undefined;
    if (concurrency === undefined && !queueWideRate) return { limit: request.limit };
    const counts = this.database.citus
      ? await this.citus.counts(query, request.queue.name, concurrency !== undefined, queueWideRate?.periodMs)
      : (
          await query<LimitCounts>(
            `SELECT
               (SELECT count(*)::int FROM ${this.workflows} WHERE queue_name = $1 AND counted_running) AS running,
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
   * Records the starts of a claim in a rate-limited queue in `queue_starts`, in the claim's transaction (under the
   * queue's lock), and deletes the queue's starts that no window can count any more: older than the first of these
   * starts by more than the period (the later claims' windows end after it). On Citus a router insert from the
   * claimed rows' partition keys (`CitusClaim.recordStartsSql`) and a fast-path `DELETE`.
   */
  private async recordStarts(query: TransactionQuery, request: ClaimRequest, rows: ClaimedRow[]): Promise<void> {
    const starts = this.database.citus
      ? await query<{ started_at: Date }>(this.citus.recordStartsSql(rows.length), [
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
   * $6 per-partition rate limit and $7 its period (null/0 when unset). `counted`: a queue with global limits.
   *
   * The candidates are ready rows (`workflow_ready`) in priority and age order, each with its active row, which says
   * whether it is due and claimable here (`readyCandidatesSql`). A queue's ready rows are locked `FOR UPDATE SKIP
   * LOCKED` as its LIMIT takes them (a partitioned queue's claims wait for the queue's row lock instead), then their
   * active rows the same way: a claim never waits, so the statements that lock an active row first and then its ready
   * row cannot deadlock with it. `taken` deletes the ready rows of what is claimed (a queue's by their `ctid`, which
   * its lock holds, so that no plan reads the queue's other ready rows); the UPDATE joins the taken rows by primary key
   * only. `limit`: the rows asked ($4), for `planningBound`.
   */
  private claimSql(partitioned: boolean, limit: number, withoutFlush = false, counted = false): string {
    const { candidates, update } = this.claimParts(partitioned, limit, withoutFlush, counted);
    return `${candidates}\n${update}`;
  }

  /** `withoutFlush`: the claim is its statement's whole transaction, whose commit need not wait for the disk. */
  private claimParts(
    partitioned: boolean,
    limit: number,
    withoutFlush = false,
    counted = false,
  ): { candidates: string; update: string } {
    const citus = this.database.citus;
    const ready = this.tables.ready;
    const due = `${READY_SQL} AND ${CLAIM_KEY_SQL} = ANY($3::text[])`;
    // NOTE: the executor's row is locked until the claim commits, so that the sweep that deletes it when its lease
    // expires waits for the claim and then recovers what it claimed (see `ExecutorStore.recoverExpired`).
    const live = citus ? '' : `AND EXISTS (SELECT 1 FROM ${this.executors} WHERE executor_id = $2 FOR KEY SHARE)`;
    const candidatesFrom = readyCandidatesSql(ready, this.workflows, due, !citus);
    // The active rows of the picks `p`, locked one by one (a probe per pick, whatever the statistics say).
    const lockActiveRows = `CROSS JOIN LATERAL (
             SELECT 1 FROM ${this.workflows} AS w
             WHERE w.queue_name = $1 AND w.workflow_id = p.workflow_id AND w.priority = p.priority AND w.seq = p.seq
               AND ${READY_SQL}
             FOR UPDATE SKIP LOCKED
           ) AS locked`;
    // On Citus a partitioned queue is claimed by `CitusClaim`.
    const partitions = `WITH RECURSIVE partitions AS (
           (SELECT partition_key FROM ${ready}
            WHERE queue_name = $1 AND partition_key IS NOT NULL
            ORDER BY partition_key LIMIT 1)
           UNION ALL
           SELECT (SELECT r.partition_key FROM ${ready} AS r
                   WHERE r.queue_name = $1 AND r.partition_key > p.partition_key
                   ORDER BY r.partition_key LIMIT 1)
           FROM partitions AS p WHERE p.partition_key IS NOT NULL
         ),`;
    const candidates = partitioned
      ? `${partitions}
         running AS (
           SELECT partition_key, count(*)::int AS n FROM ${this.workflows}
           WHERE queue_name = $1 AND counted_running AND partition_key IS NOT NULL GROUP BY partition_key
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
             SELECT r.workflow_id, r.priority, r.seq
             FROM ${candidatesFrom}
             WHERE r.queue_name = $1 AND r.partition_key = p.partition_key ${live}
             ORDER BY r.priority, r.seq
             LIMIT GREATEST(0, LEAST($4,
               coalesce($5::int - coalesce((SELECT c.n FROM running AS c WHERE c.partition_key = p.partition_key), 0), $4),
               coalesce($6::int - coalesce((SELECT c.n FROM recent AS c WHERE c.partition_key = p.partition_key), 0), $4)))
           ) AS c
           WHERE p.partition_key IS NOT NULL
           UNION ALL
           SELECT workflow_id, priority, seq, row_number() OVER (ORDER BY priority, seq)
           FROM (SELECT r.workflow_id, r.priority, r.seq FROM ${candidatesFrom}
                 WHERE r.queue_name = $1 AND r.partition_key IS NULL ${live}
                 ORDER BY r.priority, r.seq LIMIT $4) AS unpartitioned
         ),
         claimable AS (
           SELECT p.workflow_id, p.priority, p.seq
           FROM (SELECT workflow_id, priority, seq FROM picks ORDER BY turn, priority, seq LIMIT $4) AS p
           ${lockActiveRows}
         ),`
      : `WITH picked AS (
           SELECT * FROM (
             SELECT r.workflow_id, r.priority, r.seq, r.ctid AS ready_row FROM ${candidatesFrom}
             WHERE r.queue_name = $1 ${live}
               AND NOT EXISTS (SELECT 1 FROM ${this.queues} WHERE queue_name = $1 AND paused)
             ORDER BY r.priority, r.seq
             LIMIT ${planningBound(limit)}
             FOR UPDATE OF r SKIP LOCKED
           ) AS firsts
           LIMIT $4
         ),
         claimable AS (
           SELECT p.workflow_id, p.ready_row FROM picked AS p
           ${lockActiveRows}
         ),${withoutFlush ? ` ${COMMIT_WITHOUT_FLUSH_CTE},` : ''}`;
    const taken = partitioned
      ? `
         taken AS (
           ${deleteReadyRowsSql(ready, 'claimable', '$1')}
           RETURNING r.workflow_id
         )`
      : `
         taken AS (
           DELETE FROM ${ready} WHERE ctid = ANY(ARRAY(SELECT ready_row FROM claimable))
           RETURNING workflow_id
         )`;
    const update = claimUpdateSql(
      this.workflows,
      citus,
      'FROM taken',
      `w.queue_name = $1 AND w.workflow_id = taken.workflow_id${
        withoutFlush ? '\n        AND EXISTS (SELECT 1 FROM commit_without_flush)' : ''
      }`,
      counted,
    );
    return { candidates: `${candidates}${taken}`, update };
  }
}

/**
 * The LIMIT written into a claim's text above its `LIMIT $4` (the power of two at or above `limit`, the rows asked):
 * it bounds what the planner expects the claim to read. NOTE: with `LIMIT $4` alone, a generic plan assumes 10% of the
 * queue's ready rows are read, each with its probe of the active row (2,000 of 20,000, a cost 20 times a custom
 * plan's), so the plan cache planned the statement again at every call (0.55 ms each). The rows are read in index
 * order and only as `LIMIT $4` takes them, so no row past the asked ones is locked.
 */
function planningBound(limit: number): number {
  return 2 ** Math.ceil(Math.log2(Math.max(1, limit)));
}
