import { Inject, Injectable } from '@nestjs/common';
import { DedupQueueConfig } from '../dedup-queue.config';
import { QueueDatabase } from '../database/connection/queue-database';
import { WorkflowEnqueuer } from '../enqueue/workflow-enqueuer';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { UnknownQueueError } from '../errors/unknown-queue.error';
import { WorkflowNotFoundError } from '../errors/workflow-not-found.error';
import type { DedupQueueDashboardOptions } from '../interfaces/dashboard-options.interface';
import type { QueueLimits } from '../interfaces/queue-options.interface';
import { WORKFLOW_STATUSES, WorkflowErrorInfo, WorkflowStatus } from '../interfaces/workflow-status.interface';
import type { BulkControlResult, WorkflowFilter } from '../interfaces/bulk-control.interface';
import { QueueService } from '../queue.service';
import type { ForkManyOptions, ForkOptions, ForkResult } from '../interfaces/fork-options.interface';
import { WorkflowVersionsMonitor } from '../scheduler/workflow-versions.monitor';
import { workflowStreamStore, type WorkflowStreamStore } from '../database/streams/workflow-stream.store';
import { fromStoredJson } from '../utils/stored-json';
import type {
  DashboardCount,
  DashboardFork,
  DashboardVersions,
  DashboardQueue,
  DashboardChild,
  DashboardStream,
  DashboardStreamPage,
  DashboardWorkflowDetail,
  DashboardWorkflowPage,
  DashboardWorkflowSummary,
} from './dashboard-api.interface';
import { DEDUP_QUEUE_DASHBOARD_OPTIONS } from './dashboard.constants';
import { DashboardStore, ListCursor, StepRow, SummaryRow, WorkflowListFilter } from './dashboard.store';
import { exceedsCharacters } from '../utils/character-length';
import { RowValues } from '../database/connection/row-values';
import { HISTORY_STATUSES } from '../database/tables/workflow-status.sql';
import { nestsDeeperThan } from '../utils/json-depth';
import { newWorkflowId } from '../utils/workflow-id';
import { logicalQueueName, storedQueueName, storedQueueNames } from '../utils/queue-shards';

/** A list's total is counted up to this many rows ("10,000+" past it). */
export const LIST_COUNT_LIMIT = 10_000;
/** A queue's count per status is exact up to this; past it, the planner's estimate is given. */
export const STATUS_COUNT_LIMIT = 1_000;
const DEFAULT_PAGE_SIZE = 50;
const MAX_PAGE_SIZE = 500;
/** How many of a stream's last values its workflow page shows. */
const RECENT_STREAM_VALUES = 10;
const CURSOR = /^(\d{1,19})\.(\d{1,19})$/;
const LIST_PARAMETERS = [
  'queue',
  'status',
  'workflowName',
  'deduplicationId',
  'partitionKey',
  'search',
  'createdFrom',
  'createdTo',
  'parentWorkflowId',
  'limit',
  'cursor',
];
const LIMIT_FIELDS = ['concurrency', 'workerConcurrency', 'partitionConcurrency', 'rateLimit'];
const RESCHEDULE_FIELDS = ['delayMs', 'runAt', 'priority'];
const FORK_FIELDS = ['fromStep', 'version', 'workflowId', 'onDuplicate'];
const VERSIONS_MAX_AGE_MS = 10_000;

/** What the dashboard's API does: reads served by `DashboardStore`, actions through `QueueService`, all validated. */
@Injectable()
export class DashboardService {
  private readonly store: DashboardStore;
  private readonly streams: WorkflowStreamStore;

  constructor(
    private readonly queues: QueueService,
    private readonly config: DedupQueueConfig,
    private readonly enqueuer: WorkflowEnqueuer,
    @Inject(DEDUP_QUEUE_DASHBOARD_OPTIONS) private readonly options: DedupQueueDashboardOptions,
    database: QueueDatabase,
    private readonly versionReports: WorkflowVersionsMonitor,
  ) {
    this.store = new DashboardStore(database, (queueName) => storedQueueNames(config, queueName));
    this.streams = workflowStreamStore(database);
  }

  /** Every declared queue with its settings, counts per status and recent throughput. */
  async listQueues(): Promise<DashboardQueue[]> {
    const names = [...this.config.queues.keys()];
    const [settings, counts, finished, estimates] = await Promise.all([
      Promise.all(names.map((name) => this.queues.getQueueSettings(name))),
      this.store.statusCounts(names, WORKFLOW_STATUSES, STATUS_COUNT_LIMIT),
      this.store.finishedRecently(),
      this.store.estimatedCounts(),
    ]);
    return names.map((name, index) => {
      const { paused, ...limits } = settings[index];
      const recent = finished.find((row) => row.queue_name === name);
      const byStatus = Object.fromEntries(
        WORKFLOW_STATUSES.map((status) => {
          const count = counts.rows.find((row) => row.queue_name === name && row.status === status)?.count ?? 0;
          const counted = counts.complete || !HISTORY_STATUSES.includes(status);
          if (count <= STATUS_COUNT_LIMIT && counted) return [status, { value: count, exact: true }];
          const estimate = Math.round(
            estimates.rows * (estimates.queues.get(name) ?? 0) * (estimates.statuses.get(status) ?? 0),
          );
          const value = Math.min(count, STATUS_COUNT_LIMIT);
          return [status, { value, exact: false, estimate: Math.max(estimate, value + 1) }];
        }),
      ) as Record<WorkflowStatus, DashboardCount>;
      return {
        name,
        paused,
        limits,
        counts: byStatus,
        finished: { lastMinute: recent?.last_minute ?? 0, last5Minutes: recent?.last_5_minutes ?? 0 },
      };
    });
  }

  /** One page of a filtered list, newest first, with the total (capped) and the cursor of the next page. */
  async listWorkflows(query: Record<string, unknown>): Promise<DashboardWorkflowPage> {
    for (const key of Object.keys(query)) {
      if (!LIST_PARAMETERS.includes(key)) {
        throw new InvalidArgumentError(key, `is not a filter; use ${LIST_PARAMETERS.join(', ')}`);
      }
    }
    const filter = this.listFilter(query);
    const limit = integerParameter(query.limit, 'limit', 1, MAX_PAGE_SIZE) ?? DEFAULT_PAGE_SIZE;
    const cursor = cursorParameter(query.cursor);
    const [{ rows, resumeCursor }, total] = await Promise.all([
      this.store.list(filter, cursor, limit + 1, WORKFLOW_STATUSES),
      this.store.count(filter, LIST_COUNT_LIMIT, WORKFLOW_STATUSES),
    ]);
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    const more = rows.length > limit && last && last.created_us !== null ? `${last.created_us}.${last.seq}` : null;
    return {
      workflows: page.map((row) => toSummary(row, new RowValues())),
      total:
        total.count > LIST_COUNT_LIMIT || !total.complete
          ? { value: Math.min(total.count, LIST_COUNT_LIMIT), exact: false }
          : { value: total.count, exact: true },
      nextCursor: more ?? resumeCursor ?? null,
    };
  }

  /** One workflow with its inputs, outcome and steps. @throws WorkflowNotFoundError */
  async getWorkflow(workflowId: string): Promise<DashboardWorkflowDetail> {
    // NOTE: the row first: what a run records (steps, stream values) commits before its status changes, so steps read
    // after the row hold every step of the status shown (read side by side, a finished run could lack its last step).
    const row = await this.store.findDetail(workflowId);
    if (!row) throw new WorkflowNotFoundError(workflowId);
    const [steps, streams] = await Promise.all([this.store.findSteps(workflowId), this.streamsOf(workflowId)]);
    const values = new RowValues();
    const detail: DashboardWorkflowDetail = {
      streams,
      ...toSummary(row, values),
      inputs: this.shown(row.inputs),
      output: this.shown(row.output ?? null),
      error: this.visibleError(values.error('error', row.error)),
      failedAttempts: values.number('failedAttempts', row.failed_attempts),
      maxAttempts: values.number('maxAttempts', row.max_attempts),
      recoveryAttempts: values.number('recoveryAttempts', row.recovery_attempts),
      maxRecoveryAttempts: values.number('maxRecoveryAttempts', row.max_recovery_attempts),
      timeoutMs: row.timeout_ms === null ? null : values.number('timeoutMs', row.timeout_ms),
      deadlineAt: isoOrNull(values.date('deadlineAt', row.deadline_at)),
      updatedAt: values.requiredDate('updatedAt', row.updated_at).toISOString(),
      parentWorkflowId: values.text('parentWorkflowId', row.parent_workflow_id),
      children: childrenOf(steps),
      steps: steps.map((step) => ({
        index: values.number(`steps[${step.step_index}].index`, step.step_index),
        name: values.requiredText(`steps[${step.step_index}].name`, step.step_name),
        output: this.shown(step.output ?? null),
        error: this.visibleError(values.error(`steps[${step.step_index}].error`, step.error)),
        startedAt: isoOrNull(values.date(`steps[${step.step_index}].startedAt`, step.started_at)),
        completedAt: values.requiredDate(`steps[${step.step_index}].completedAt`, step.completed_at).toISOString(),
        durationMs: step.duration_ms === null ? null : Math.round(step.duration_ms * 1000) / 1000,
      })),
    };
    return { ...detail, ...values.report() };
  }

  /** A page of a stream's values from `offset` (`offset`, `limit` query parameters). @throws WorkflowNotFoundError */
  async getStream(workflowId: string, key: string, query: Record<string, unknown>): Promise<DashboardStreamPage> {
    const offset = integerParameter(query.offset, 'offset', 0, 2 ** 31 - 1) ?? 0;
    const limit = integerParameter(query.limit, 'limit', 1, MAX_PAGE_SIZE) ?? DEFAULT_PAGE_SIZE;
    const location = await this.streams.locate(workflowId);
    if (!location) throw new WorkflowNotFoundError(workflowId);
    const page = await this.streams.read(location, workflowId, key, offset, limit);
    const values = page.entries.filter((entry) => !entry.closed);
    const last = values.at(-1);
    const closedHere = page.entries.some((entry) => entry.closed);
    return {
      key,
      values: values.map((entry) => ({ offset: entry.offset, value: fromStoredJson(entry.valueJson ?? 'null') })),
      nextOffset: last ? last.offset + 1 : offset,
      ended: closedHere || (page.finished && page.entries.length < limit),
    };
  }

  /** A workflow's streams, each with its last values. */
  private async streamsOf(workflowId: string): Promise<DashboardStream[]> {
    const location = await this.streams.locate(workflowId);
    if (!location) return [];
    const summaries = await this.streams.summaries(location, workflowId);
    return Promise.all(
      summaries.map(async (stream) => {
        const from = Math.max(stream.values - RECENT_STREAM_VALUES, 0);
        const page = await this.streams.read(location, workflowId, stream.key, from, RECENT_STREAM_VALUES);
        return {
          key: stream.key,
          values: stream.values,
          bytes: stream.bytes,
          closed: stream.closed,
          lastWrittenAt: stream.lastWrittenAt.toISOString(),
          recent: page.entries
            .filter((entry) => !entry.closed)
            .map((entry) => ({ offset: entry.offset, value: fromStoredJson(entry.valueJson ?? 'null') })),
        };
      }),
    );
  }

  async cancel(workflowId: string): Promise<{ workflowId: string; status: WorkflowStatus }> {
    return { workflowId, status: await this.queues.cancel(workflowId) };
  }

  /** Cancels every workflow the filter matches (`QueueService.cancelMany`); `{ results }`, one per matched workflow. */
  async cancelMatching(body: unknown): Promise<{ results: BulkControlResult[] }> {
    return { results: await this.queues.cancelMany(body as WorkflowFilter) };
  }

  /** Resumes every workflow the filter matches (`QueueService.resumeMany`); `{ results }`, one per matched workflow. */
  async resumeMatching(body: unknown): Promise<{ results: BulkControlResult[] }> {
    return { results: await this.queues.resumeMany(body as WorkflowFilter) };
  }

  /**
   * Forks every workflow the filter matches (`QueueService.forkMany`), from each one's failed step unless `fromStep`
   * says otherwise; `{ results }`, one per matched workflow. The body is the filter of `cancelMatching` with the
   * options `fromStep` and `version`.
   */
  async forkMatching(body: unknown): Promise<{ results: ForkResult[] }> {
    const { fromStep, version, ...filter } = (body ?? {}) as WorkflowFilter & ForkManyOptions;
    return { results: await this.queues.forkMany(filter, { fromStep, version }) };
  }

  /** Forks one workflow (`QueueService.fork`); the body holds its options (`{}`: from the failed step). */
  async fork(workflowId: string, body: unknown): Promise<DashboardFork> {
    const options = plainObject(body ?? {}, FORK_FIELDS, true) as ForkOptions;
    const fork = await this.queues.fork(workflowId, options);
    return { workflowId: fork.workflowId, forkedFrom: workflowId, created: fork.created };
  }

  /**
   * The versions of the workflows with their runs in flight, and the stranded runs, from a report at most
   * `VERSIONS_MAX_AGE_MS` old (it reads every queue's unfinished runs: not at every refresh of every open page).
   */
  async versions(): Promise<DashboardVersions> {
    const report = await this.versionReports.report(VERSIONS_MAX_AGE_MS);
    return { versions: report.versions, stranded: report.stranded, checkedAt: report.at.toISOString() };
  }

  async resume(workflowId: string): Promise<{ workflowId: string; status: WorkflowStatus }> {
    const handle = await this.queues.resume(workflowId);
    return { workflowId, status: (await handle.getStatus()).status };
  }

  /**
   * Enqueues a new workflow with the same queue, workflow, inputs, deduplication ID, partition key, priority and
   * limits (attempts, timeout, deduplication window) as `workflowId`. Needs no code for the workflow in this process.
   * @throws QueueDeduplicatedError when its deduplication ID is held
   */
  async rerun(workflowId: string): Promise<{ workflowId: string; rerunOf: string }> {
    const row = await this.store.findRerunSource(workflowId);
    if (!row) throw new WorkflowNotFoundError(workflowId);
    const queueName = logicalQueueName(row.queueName);
    this.assertDeclared(queueName);
    const rerunId = newWorkflowId();
    const enqueued = await this.enqueuer.enqueue(
      {
        ...row,
        queueName: storedQueueName(this.config, queueName, row.deduplicationId ?? rerunId),
        workflowId: rerunId,
        workflowIdGiven: false,
        runAt: null,
        delayMs: null,
        maxDelayMs: null,
        deadlineAt: null,
      },
      {
        onDuplicate: 'reject',
        whenRunning: 'reject',
      },
    );
    return { workflowId: enqueued.workflowId, rerunOf: workflowId };
  }

  async reschedule(workflowId: string, body: unknown): Promise<DashboardWorkflowDetail> {
    const change = plainObject(body, RESCHEDULE_FIELDS);
    if (typeof change.runAt === 'string') change.runAt = dateParameter(change.runAt, 'runAt');
    await this.queues.reschedule(workflowId, change);
    return this.getWorkflow(workflowId);
  }

  async setPaused(queueName: string, paused: boolean): Promise<DashboardQueue> {
    this.assertDeclared(queueName);
    await (paused ? this.queues.pauseQueue(queueName) : this.queues.resumeQueue(queueName));
    return this.queue(queueName);
  }

  /** Changes limits given in `body` (null: back to the declared value); the others stay. */
  async setLimits(queueName: string, body: unknown): Promise<DashboardQueue> {
    this.assertDeclared(queueName);
    const limits = plainObject(body, LIMIT_FIELDS) as { [K in keyof QueueLimits]?: QueueLimits[K] | null };
    await this.queues.setQueueLimits(queueName, limits);
    return this.queue(queueName);
  }

  private async queue(name: string): Promise<DashboardQueue> {
    return (await this.listQueues()).find((queue) => queue.name === name) as DashboardQueue;
  }

  private assertDeclared(queueName: string): void {
    if (!this.config.queues.has(queueName)) throw new UnknownQueueError(queueName, [...this.config.queues.keys()]);
  }

  private listFilter(query: Record<string, unknown>): WorkflowListFilter {
    const queueName = textParameter(query.queue, 'queue');
    if (queueName !== undefined) this.assertDeclared(queueName);
    const queueNames = queueName === undefined ? undefined : storedQueueNames(this.config, queueName);
    const statusText = textParameter(query.status, 'status');
    const statuses = statusText?.split(',').map((status) => status.trim());
    for (const status of statuses ?? []) {
      if (!WORKFLOW_STATUSES.includes(status as WorkflowStatus)) {
        throw new InvalidArgumentError('status', `"${status}" is not a status; use ${WORKFLOW_STATUSES.join(', ')}`);
      }
    }
    const createdFrom = dateParameter(query.createdFrom, 'createdFrom');
    const createdTo = dateParameter(query.createdTo, 'createdTo');
    if (createdFrom && createdTo && createdFrom >= createdTo) {
      throw new InvalidArgumentError('createdFrom', 'must be before createdTo');
    }
    return {
      queueNames,
      statuses: statuses && ([...new Set(statuses)] as WorkflowStatus[]),
      workflowName: textParameter(query.workflowName, 'workflowName'),
      deduplicationId: textParameter(query.deduplicationId, 'deduplicationId'),
      partitionKey: textParameter(query.partitionKey, 'partitionKey'),
      search: textParameter(query.search, 'search')?.trim() || undefined,
      createdFrom,
      createdTo,
      parentWorkflowId: textParameter(query.parentWorkflowId, 'parentWorkflowId'),
    };
  }

  /**
   * A stored value as the API gives it, or a note in its place when it is nested deeper than `inputLimits.maxDepth`
   * (written through SQL before the limit, or by another tool): such a value would fail the whole answer.
   */
  private shown(value: unknown): unknown {
    const { maxDepth } = this.config.inputLimits;
    return nestsDeeperThan(value, maxDepth) ? `(not shown: nested deeper than ${maxDepth} levels)` : value;
  }

  private visibleError(error: WorkflowErrorInfo | null): WorkflowErrorInfo | null {
    if (!error || this.options.showErrorStacks) return error ?? null;
    const { stack: _stack, ...rest } = error;
    return rest;
  }
}

/** A list's row, its unreadable values reported in `unexpectedValues` (see `RowValues`) rather than thrown. */
function toSummary(row: SummaryRow, values: RowValues): DashboardWorkflowSummary {
  const status = values.status('status', row.status);
  return {
    workflowId: values.requiredText('workflowId', row.workflow_id),
    queueName: logicalQueueName(values.requiredText('queueName', row.queue_name)),
    workflowName: values.requiredText('workflowName', row.workflow_name),
    version: values.number('version', row.workflow_version),
    forkedFrom: values.text('forkedFrom', row.forked_from),
    status,
    deduplicationId: values.text('deduplicationId', row.deduplication_id),
    holdsDeduplicationId: row.holds_key === true,
    partitionKey: values.text('partitionKey', row.partition_key),
    priority: values.number('priority', row.priority),
    attempts: values.number('attempts', row.attempts),
    executorId: values.text('executorId', row.executor_id),
    createdAt: values.requiredDate('createdAt', row.created_at).toISOString(),
    startedAt: isoOrNull(values.date('startedAt', row.started_at)),
    completedAt: isoOrNull(values.date('completedAt', row.completed_at)),
    notBefore: isoOrNull(values.date('notBefore', row.not_before, true)),
    parentWorkflowId: values.text('parentWorkflowId', row.parent_workflow_id),
    ...values.report(),
  };
}

function isoOrNull(date: Date | null): string | null {
  return date ? date.toISOString() : null;
}

function textParameter(value: unknown, name: string): string | undefined {
  if (value === undefined || value === '') return undefined;
  if (typeof value !== 'string') throw new InvalidArgumentError(name, 'must be given once, as text');
  if (exceedsCharacters(value, 255)) throw new InvalidArgumentError(name, 'must be at most 255 characters');
  return value;
}

function integerParameter(value: unknown, name: string, min: number, max: number): number | undefined {
  const text = textParameter(value, name);
  if (text === undefined) return undefined;
  const number = Number(text);
  if (!/^\d+$/.test(text) || number < min || number > max) {
    throw new InvalidArgumentError(name, `must be an integer from ${min} to ${max}`);
  }
  return number;
}

function dateParameter(value: unknown, name: string): Date | undefined {
  const text = textParameter(value, name);
  if (text === undefined) return undefined;
  const date = new Date(text);
  if (Number.isNaN(date.getTime())) throw new InvalidArgumentError(name, 'must be a date (ISO 8601)');
  return date;
}

function cursorParameter(value: unknown): ListCursor | undefined {
  const text = textParameter(value, 'cursor');
  if (text === undefined) return undefined;
  const match = CURSOR.exec(text);
  if (!match) throw new InvalidArgumentError('cursor', 'must be a nextCursor given by an earlier page');
  return { createdAtMicros: match[1], seq: match[2] };
}

/** A JSON object body holding only `fields`, at least one of them unless `mayBeEmpty`. */
function plainObject(body: unknown, fields: string[], mayBeEmpty = false): Record<string, unknown> {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new InvalidArgumentError('body', `must be a JSON object with ${fields.join(', ')}`);
  }
  const keys = Object.keys(body);
  const unknown = keys.find((key) => !fields.includes(key));
  if (unknown !== undefined) throw new InvalidArgumentError(unknown, `is not accepted here; use ${fields.join(', ')}`);
  if (keys.length === 0 && !mayBeEmpty) {
    throw new InvalidArgumentError('body', `must give at least one of ${fields.join(', ')}`);
  }
  return { ...body };
}

/** The children a workflow created, from its recorded `enqueue` and `enqueueMany` positions (see ChildWorkflows). */
function childrenOf(steps: StepRow[]): DashboardChild[] {
  return steps.flatMap((step) => {
    const outcomes: unknown[] = step.step_name.startsWith('enqueue ')
      ? [step.output]
      : step.step_name.startsWith('enqueueMany ') && Array.isArray(step.output)
        ? (step.output as unknown[])
        : [];
    return outcomes
      .filter(
        (outcome): outcome is { workflowId: string } =>
          typeof outcome === 'object' &&
          outcome !== null &&
          typeof (outcome as { workflowId?: unknown }).workflowId === 'string' &&
          ((outcome as { created?: unknown }).created === true ||
            (outcome as { status?: unknown }).status === 'created'),
      )
      .map((outcome) => ({ workflowId: outcome.workflowId, stepIndex: step.step_index }));
  });
}
