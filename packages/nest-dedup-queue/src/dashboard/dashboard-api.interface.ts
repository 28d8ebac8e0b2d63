import type { QueueLimits } from '../interfaces/queue-options.interface';
import type { UnexpectedValue, WorkflowErrorInfo, WorkflowStatus } from '../interfaces/workflow-status.interface';
import type { StrandedRuns, WorkflowVersionInfo } from '../interfaces/workflow-version.interface';

/**
 * A count that stops at a limit, so that counting never scans a million rows: `exact: false` means "at least
 * `value`" (the page shows "10,000+"): the limit was reached, or the history (which has no index for counts) was
 * read only in part (its newest 100,000 rows for a list's total, 50,000 for a queue's counts). A queue's count per
 * status then also gives `estimate`, the planner's estimate from the table's statistics (the page shows "≈ 912,000").
 */
export interface DashboardCount {
  value: number;
  exact: boolean;
  estimate?: number;
}

/** `GET <path>/api/queues`: one declared queue. */
export interface DashboardQueue {
  name: string;
  paused: boolean;
  /** The limits that apply now: declared, with run-time changes. */
  limits: QueueLimits;
  /** Workflows of the queue per status. */
  counts: Record<WorkflowStatus, DashboardCount>;
  /** Workflows of the queue that finished (any final status) in the last minute and the last 5 minutes. */
  finished: { lastMinute: number; last5Minutes: number };
}

/** One row of a list. */
export interface DashboardWorkflowSummary {
  workflowId: string;
  queueName: string;
  workflowName: string;
  /** The version of the workflow it was enqueued with. */
  version: number;
  /** The workflow it was forked from (`QueueService.fork`), or null. */
  forkedFrom: string | null;
  status: WorkflowStatus;
  deduplicationId: string | null;
  /** Whether it holds its deduplication ID now (an enqueue with the same ID would be refused). */
  holdsDeduplicationId: boolean;
  partitionKey: string | null;
  priority: number;
  attempts: number;
  executorId: string | null;
  createdAt: string;
  startedAt: string | null;
  completedAt: string | null;
  /** See `WorkflowStatusInfo.notBefore`: null also for a wait without a timeout. */
  notBefore: string | null;
  /** The workflow whose body enqueued this one, or null. */
  parentWorkflowId: string | null;
  /**
   * Present only when a stored value of the row is not of its documented type: each such field with what was stored
   * (see `WorkflowStatusInfo.unexpectedValues`); the row is served with stand-ins, and the page marks it.
   */
  unexpectedValues?: UnexpectedValue[];
}

/** `GET <path>/api/workflows`: one page of a list, newest first. */
export interface DashboardWorkflowPage {
  workflows: DashboardWorkflowSummary[];
  /** How many workflows match the filters (all pages). */
  total: DashboardCount;
  /** Pass as `cursor` for the next (older) page; null on the last page. */
  nextCursor: string | null;
}

/** One checkpointed step of a workflow. */
export interface DashboardStep {
  index: number;
  name: string;
  /** The step's return value; null when it returned nothing or failed. */
  output: unknown;
  error: WorkflowErrorInfo | null;
  /** When it started and ended; `startedAt` and `durationMs` are null for steps recorded before version 10. */
  startedAt: string | null;
  completedAt: string;
  durationMs: number | null;
}

/** `GET <path>/api/workflows/:id`: everything stored about one workflow. */
export interface DashboardWorkflowDetail extends DashboardWorkflowSummary {
  inputs: unknown;
  /** The return value (SUCCESS); null when it returned nothing or has not finished. */
  output: unknown;
  error: WorkflowErrorInfo | null;
  failedAttempts: number;
  maxAttempts: number;
  recoveryAttempts: number;
  maxRecoveryAttempts: number;
  timeoutMs: number | null;
  deadlineAt: string | null;
  updatedAt: string;
  steps: DashboardStep[];
  /**
   * The workflows this one's body created (its children), in the order it enqueued them, read from its recorded
   * enqueues: a holder it only joined (`return-existing`) or that refused it is not one of them.
   */
  children: DashboardChild[];
  /** Its durable streams (`writeStream`), by key, each with its last values. */
  streams: DashboardStream[];
}

/** A durable stream of a workflow, as its workflow page lists it. */
export interface DashboardStream {
  key: string;
  /** How many values it holds, and their size in bytes (JSON, UTF-8). */
  values: number;
  bytes: number;
  /** Closed by `closeStream` or by the end of its workflow. */
  closed: boolean;
  lastWrittenAt: string;
  /** Its last values (up to 10), oldest first. */
  recent: DashboardStreamValue[];
}

/** A value of a stream at its offset. */
export interface DashboardStreamValue {
  offset: number;
  value: unknown;
}

/** `GET <path>/api/workflows/:id/streams/:key?offset=&limit=`: a page of a stream's values, from `offset`. */
export interface DashboardStreamPage {
  key: string;
  values: DashboardStreamValue[];
  /** The offset after the last value given (where the next page starts). */
  nextOffset: number;
  /** Whether the stream ends after these values (closed, and nothing is left to read). */
  ended: boolean;
}

/** A child workflow, as its parent recorded it. */
export interface DashboardChild {
  workflowId: string;
  /** The parent's step position that enqueued it. */
  stepIndex: number;
}

/**
 * `GET <path>/api/versions`: each workflow name and version with its runs in flight and the live executors that
 * register it, and the runs no live executor would claim (see `QueueService.listVersions()`).
 */
export interface DashboardVersions {
  versions: WorkflowVersionInfo[];
  stranded: StrandedRuns[];
  /** When the report was read (ISO). */
  checkedAt: string;
}

/** `POST <path>/api/workflows/:id/fork`: the fork made (or found: `created: false`). */
export interface DashboardFork {
  workflowId: string;
  forkedFrom: string;
  created: boolean;
}

/** `GET <path>/api/schedules`: one schedule, a `@Scheduled` method's or one made with `ScheduleService.create()`. */
export interface DashboardSchedule {
  name: string;
  cron: string;
  /** The IANA time zone, or null for UTC. */
  timezone: string | null;
  source: 'decorator' | 'runtime';
  workflowName: string;
  queueName: string;
  paused: boolean;
  /** ISO time of the next tick; null while paused or when the cron has no future tick. */
  nextRunAt: string | null;
  /** ISO time of the most recent run it enqueued (a tick's time, or a trigger's). */
  lastRunAt: string | null;
  /** That run's workflow ID. */
  lastWorkflowId: string | null;
}
