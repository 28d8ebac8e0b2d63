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
 * The UPDATE that claims the active rows `w` of `workflows` (joined to `from`, matching `where`) for executor $2,
 * returning `ClaimedRow`s.
 */
export function claimUpdateSql(workflows: string, citus: boolean, from: string, where: string): string {
  return `
      UPDATE ${workflows} AS w
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
