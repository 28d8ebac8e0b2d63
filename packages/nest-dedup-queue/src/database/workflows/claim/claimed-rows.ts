import type { ResolvedQueue } from '../../../dedup-queue.config';
import { STATUS_SQL } from '../../tables/workflow-status.sql';
import { nowPlusMsSql, startTimeSql } from '../../connection/time.sql';

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

/** A claimed row as the claim's UPDATE returns it (`claimUpdateSql`). */
export interface ClaimedRow {
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

/** What `allowedStarts` counts: running workflows, starts in the rate window, and when the first of those leaves it. */
export interface LimitCounts {
  running: number;
  recent: number;
  frees_in_ms: number | null;
}

/**
 * The ready rows `r` of a claim's candidates, each kept when its active row (the same queue, ID, priority and `seq`)
 * matches `due`: whether a workflow is due and claimable here is read on its active row, without a lock. The caller
 * locks `r` at its query's level (`FOR UPDATE OF r SKIP LOCKED`), which PostgreSQL applies to the rows its LIMIT
 * takes, after any sort, and then the active rows of what it took (`FOR UPDATE SKIP LOCKED`). NOT a lock inside the
 * probe: a plan that sorts the ready rows (a small queue's) would lock every due row of the queue before its LIMIT,
 * and a concurrent claim, skipping them, would come back empty. `fenced` (one server): a LATERAL probe per ready row
 * that the planner cannot turn into a join (`LIMIT 1`: a primary key's row at most); as a join, the planner hashed
 * every ready row of the queue with every active row (it cannot estimate how many match the claim key), 20 ms per
 * claim with 20,000 queued. Citus plans no fenced subquery as a router statement, so there it is a join.
 */
export function readyCandidatesSql(ready: string, workflows: string, due: string, fenced: boolean): string {
  return `${ready} AS r
         CROSS JOIN LATERAL (
           SELECT w.status FROM ${workflows} AS w
           WHERE w.queue_name = r.queue_name AND w.workflow_id = r.workflow_id AND w.priority = r.priority
             AND w.seq = r.seq AND ${due}
           ${fenced ? 'LIMIT 1' : ''}
         ) AS w`;
}

/** The ready rows `r` of queue $1 joined to their active rows `w`, for a look-up by IDs (driven by the active rows). */
export function readyJoinSql(ready: string, workflows: string): string {
  return `${ready} AS r JOIN ${workflows} AS w
         ON w.queue_name = r.queue_name AND w.workflow_id = r.workflow_id AND w.priority = r.priority AND w.seq = r.seq`;
}

/**
 * The UPDATE that claims the active rows `w` of `workflows` (joined to `from`, matching `where`) for executor $2,
 * returning `ClaimedRow`s. `counted`: the claim of a queue with global limits, whose running workflows its limits
 * count (`counted_running`, migration 025); other claims leave the row's indexed values as they were (a HOT update).
 */
export function claimUpdateSql(
  workflows: string,
  citus: boolean,
  from: string,
  where: string,
  counted = false,
): string {
  return `
      UPDATE ${workflows} AS w
      SET status = ${STATUS_SQL.PENDING}, executor_id = $2, attempts = w.attempts + 1, counted = ${counted},
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

/** The name the claimed rows are stored under. */
export function storedName(request: ClaimRequest): string {
  return request.storedQueueName ?? request.queue.name;
}

/** The claimed workflows of `rows`, highest priority and oldest first. */
export function toClaimed(rows: ClaimedRow[], storedQueueName: string): ClaimedWorkflow[] {
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
