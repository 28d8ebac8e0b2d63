import { Injectable } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { DedupQueueConfig, isPartitioned, resolveLimits, QUEUE_LIMIT_KEYS } from './dedup-queue.config';
import { QueueControlStore } from './database/queue-control.store';
import { QueueSettings } from './queue-settings';
import { toStatusInfo } from './database/workflow-row';
import { isUniqueViolationOn } from './database/sql-errors';
import { ACTIVE_DEDUPLICATION_INDEX, InsertResult, NewWorkflow, WorkflowInserter } from './database/workflow-inserter';
import { WorkflowStore } from './database/workflow.store';
import { DeduplicationEvents } from './enqueue/deduplication-events';
import { WorkflowEnqueuer } from './enqueue/workflow-enqueuer';
import { WorkflowRegistry } from './discovery/workflow.registry';
import { InvalidArgumentError } from './errors/invalid-argument.error';
import { QueueDeduplicatedError } from './errors/queue-deduplicated.error';
import { UnknownQueueError } from './errors/unknown-queue.error';
import { WorkflowNotFoundError } from './errors/workflow-not-found.error';
import type { EntityManager } from 'typeorm';
import type { BulkEnqueueItem, BulkEnqueueResult } from './interfaces/bulk-enqueue.interface';
import type { DeduplicationEvent } from './interfaces/deduplication-event.interface';
import type { EnqueueOptions } from './interfaces/enqueue-options.interface';
import type { QueueLimits } from './interfaces/queue-options.interface';
import type { ListWorkflowsOptions } from './interfaces/list-workflows-options.interface';
import type { EnqueuedWorkflowHandle, WorkflowHandle } from './interfaces/workflow-handle.interface';
import type { WorkflowStatus, WorkflowStatusInfo } from './interfaces/workflow-status.interface';
import { QueueWorkflowHandle } from './queue-workflow.handle';
import { unknownKey } from './utils/known-keys';
import { QueueScheduler } from './scheduler/queue.scheduler';
import type { AbandonedRunInfo } from './interfaces/abandoned-run.interface';
import { ValidEnqueueOptions, serialiseArgs, validateEnqueueOptions } from './utils/enqueue-options.validation';
import { WorkflowLifecycle } from './observability/workflow-lifecycle.events';
import { WorkflowTracer } from './observability/workflow.tracer';
import { WorkflowCompletions } from './workflow-completions';

/** A `@Workflow()` method, as passed to `enqueue` by reference. */
export type WorkflowFunction = (...args: any[]) => unknown;

type EnqueueCall = [queueName: string, workflow: WorkflowFunction | string, args: unknown[], options?: EnqueueOptions];
type WithoutQueue<T> = T extends [string, ...infer Rest] ? Rest : never;

const MAX_LIST_LIMIT = 10_000;
const BULK_CHUNK = 1000;

/** Enqueues workflows and looks them up. Inject it anywhere once `DedupQueueModule.forRoot()` is imported. */
@Injectable()
export class QueueService {
  constructor(
    private readonly config: DedupQueueConfig,
    private readonly registry: WorkflowRegistry,
    private readonly store: WorkflowStore,
    private readonly completions: WorkflowCompletions,
    private readonly settings: QueueSettings,
    private readonly control: QueueControlStore,
    private readonly inserter: WorkflowInserter,
    private readonly enqueuer: WorkflowEnqueuer,
    private readonly events: DeduplicationEvents,
    private readonly scheduler: QueueScheduler,
    private readonly lifecycle: WorkflowLifecycle,
    private readonly tracer: WorkflowTracer,
  ) {}

  /**
   * Enqueues one run of a workflow. The row is written in one statement (one transaction, shared with concurrent
   * calls under load) and workers are woken on commit. Everything is validated before anything is written.
   *
   * @param queueName a queue declared in `DedupQueueModule.forRoot({ queues })`
   * @param workflow the `@Workflow()` method (`this.tasks.process`) or its registered name (`'UserTasks.process'`)
   * @param args the arguments, stored as JSON (see the README for what round-trips)
   * @param options `deduplicationId`, `onDuplicate`, `workflowId`, `timeoutMs`, `partitionKey`, `priority`, `delayMs`,
   *   `runAt`, `deduplicationWindowMs`, `manager` (see `EnqueueOptions`)
   * @throws QueueDeduplicatedError when `deduplicationId` is held by an ENQUEUED or PENDING workflow of the queue
   *   (or one still in its deduplication window) and the policy is to reject
   * @throws UnknownQueueError, UnknownWorkflowError, InvalidArgumentError, WorkflowIdConflictError
   */
  enqueue<F extends WorkflowFunction>(
    queueName: string,
    workflow: F,
    args: Parameters<F>,
    options?: EnqueueOptions,
  ): Promise<EnqueuedWorkflowHandle<Awaited<ReturnType<F>>>>;
  enqueue<R = unknown>(
    queueName: string,
    workflow: string,
    args: unknown[],
    options?: EnqueueOptions,
  ): Promise<EnqueuedWorkflowHandle<R>>;
  /**
   * Enqueues one run of a workflow into its default queue, `@Workflow({ queue })`; otherwise as
   * `enqueue(queueName, workflow, args, options)`.
   * @throws InvalidArgumentError when the workflow has no default queue
   */
  enqueue<F extends WorkflowFunction>(
    workflow: F,
    args: Parameters<F>,
    options?: EnqueueOptions,
  ): Promise<EnqueuedWorkflowHandle<Awaited<ReturnType<F>>>>;
  enqueue<R = unknown>(workflow: string, args: unknown[], options?: EnqueueOptions): Promise<EnqueuedWorkflowHandle<R>>;
  async enqueue(...call: EnqueueCall | WithoutQueue<EnqueueCall>): Promise<EnqueuedWorkflowHandle<unknown>> {
    const [queueName, workflow, args, options = {}] = Array.isArray(call[1])
      ? ([this.registry.defaultQueue(call[0]), ...call] as EnqueueCall)
      : (call as EnqueueCall);
    const { valid, row } = await this.prepare(queueName, workflow, args, options, 'options');
    const enqueued = await this.enqueuer.enqueue(row, valid, valid.manager);
    return this.handle(enqueued.workflowId, enqueued.created);
  }

  /**
   * Enqueues many runs of one workflow in one statement (chunks of 1000), with the same guarantees as `enqueue`:
   * the database decides every duplicate, including duplicates within the batch (the first wins). Returns one
   * outcome per item, in order: `created`, `duplicate` (with the holder's ID) or `existing` (its `workflowId` was
   * used before). Duplicates are reported, not thrown. Everything is validated before anything is written.
   */
  async enqueueMany(
    queueName: string,
    workflow: WorkflowFunction | string,
    items: BulkEnqueueItem[],
    options: { manager?: EntityManager } = {},
  ): Promise<BulkEnqueueResult[]> {
    if (!Array.isArray(items)) throw new InvalidArgumentError('items', 'must be an array of { args, options? }');
    const prepared = [];
    for (const [index, item] of items.entries()) {
      prepared.push(
        await this.prepare(queueName, workflow, item?.args, { ...item?.options, manager: options.manager }, `items[${index}].options`, `items[${index}].args`),
      );
    }
    const ids = new Set<string>();
    prepared.forEach(({ row }, index) => {
      if (ids.has(row.workflowId)) throw new InvalidArgumentError(`items[${index}].options.workflowId`, 'repeats an earlier item\'s workflowId');
      ids.add(row.workflowId);
    });
    const rows = prepared.map(({ row }) => row);
    return this.tracer.send(queueName, rows, () => this.insertInChunks(rows, options.manager));
  }

  private async insertInChunks(rows: NewWorkflow[], manager?: EntityManager): Promise<BulkEnqueueResult[]> {
    const inserter = manager ? this.inserter.inTransaction(manager) : this.inserter;
    const results: BulkEnqueueResult[] = [];
    for (let start = 0; start < rows.length; start += BULK_CHUNK) {
      const chunk = rows.slice(start, start + BULK_CHUNK);
      const inserted = await inserter.insertMany(chunk);
      for (const [index, result] of inserted.entries()) {
        results.push(await this.bulkOutcome(chunk[index], result, manager));
      }
    }
    return results;
  }

  /** A handle to the workflow that holds a deduplication ID in a queue now, or undefined when the ID is free. */
  async findByDeduplicationId<R = unknown>(queueName: string, deduplicationId: string): Promise<WorkflowHandle<R> | undefined> {
    this.assertDeclared(queueName);
    const holder = await this.inserter.findHolder(queueName, deduplicationId);
    return holder && this.handle<R>(holder.workflowId);
  }

  /**
   * Calls `listener` for every deduplication hit in this process (queue, key, holder and what the policy did).
   * Returns a function that removes the listener.
   */
  onDeduplicated(listener: (event: DeduplicationEvent) => void): () => void {
    return this.events.listen(listener);
  }

  /** Deduplication hits per queue in this process since it started. */
  deduplicationCounts(): Record<string, number> {
    return this.events.countsByQueue();
  }

  /** A handle to an existing workflow. @throws WorkflowNotFoundError when no workflow has this ID. */
  async retrieve<R = unknown>(workflowId: string): Promise<WorkflowHandle<R>> {
    if (!(await this.store.findRow(workflowId))) {
      throw new WorkflowNotFoundError(workflowId);
    }
    return this.handle<R>(workflowId);
  }

  /**
   * Ends an ENQUEUED, DELAYED or PENDING workflow as CANCELLED and frees its deduplication ID at once. A running
   * body's `workflowContext().signal` aborts (in whichever process runs it) and its slot is freed at once, whether
   * or not the body returns; its outcome is no longer recorded (see `abandonedRuns()`). A finished workflow keeps
   * its status. Resolves with the workflow's status afterwards.
   * @throws WorkflowNotFoundError when no workflow has this ID.
   */
  async cancel(workflowId: string): Promise<WorkflowStatus> {
    const cancelled = await this.store.cancel(workflowId);
    if (cancelled === undefined) {
      throw new WorkflowNotFoundError(workflowId);
    }
    if (cancelled.status === 'CANCELLED') {
      this.scheduler.cancelled({ workflowId, reason: 'cancelled', attempt: cancelled.attempts });
      this.completions.finished(workflowId);
    }
    if (cancelled.cancelled) this.lifecycle.emit({ event: 'cancelled', ...cancelled.cancelled, reason: 'cancelled' });
    return cancelled.status;
  }

  /**
   * The bodies of cancelled or timed-out workflows that still run in this process although their slots were freed
   * (they ignore their signal). Each is reported once in the log after a second, then at growing intervals.
   */
  abandonedRuns(): AbandonedRunInfo[] {
    return this.scheduler.abandonedRuns();
  }

  /**
   * How many workflows each queue has per status, read from Postgres (so for every process), `DELAYED` counted
   * apart from `ENQUEUED`: `{ [queueName]: { ENQUEUED: 3, DELAYED: 1, ... } }` (statuses with none are left out).
   */
  async countByStatus(queueName?: string): Promise<Record<string, Partial<Record<WorkflowStatus, number>>>> {
    if (queueName !== undefined) this.assertDeclared(queueName);
    const counts: Record<string, Partial<Record<WorkflowStatus, number>>> = {};
    for (const row of await this.store.countByStatus(queueName)) {
      (counts[row.queueName] ??= {})[row.status] = row.count;
    }
    return counts;
  }

  /**
   * Puts a CANCELLED or dead-lettered (`MAX_RECOVERY_ATTEMPTS_EXCEEDED`) workflow back in its queue, ready at once:
   * it takes its deduplication ID again, keeps its completed steps (replayed) and its priority, drops any delay
   * (reschedule it afterwards to wait), gets a fresh timeout when it starts, and its recovery count starts over;
   * its attempt number goes on counting and its used retry attempts stay used. Resuming an ENQUEUED, DELAYED or
   * PENDING workflow changes nothing (it does not jump its queue).
   * @throws QueueDeduplicatedError when another workflow holds its deduplication ID meanwhile
   * @throws InvalidArgumentError when it finished with SUCCESS or ERROR
   * @throws WorkflowNotFoundError when no workflow has this ID
   */
  async resume<R = unknown>(workflowId: string): Promise<WorkflowHandle<R>> {
    let resumed;
    try {
      resumed = await this.store.resume(workflowId);
    } catch (error) {
      if (isUniqueViolationOn(error, ACTIVE_DEDUPLICATION_INDEX)) {
        const row = await this.store.findRow(workflowId);
        const key = row?.deduplication_id as string;
        const holder = await this.inserter.findHolder(row?.queue_name as string, key);
        throw new QueueDeduplicatedError(row?.queue_name as string, key, holder?.workflowId ?? '(finished meanwhile; try again)');
      }
      throw error;
    }
    if (!resumed) throw new WorkflowNotFoundError(workflowId);
    if (resumed.before === 'SUCCESS' || resumed.before === 'ERROR') {
      throw new InvalidArgumentError('workflowId', `names a workflow that ended with ${resumed.before}; only CANCELLED or MAX_RECOVERY_ATTEMPTS_EXCEEDED workflows can be resumed`);
    }
    return this.handle<R>(workflowId);
  }

  /**
   * Changes when an ENQUEUED workflow may start (`delayMs` from now, or `runAt`) and/or its `priority`.
   * @throws InvalidArgumentError when the workflow is no longer ENQUEUED, or the change is invalid
   * @throws WorkflowNotFoundError when no workflow has this ID
   */
  async reschedule(workflowId: string, change: Pick<EnqueueOptions, 'delayMs' | 'runAt' | 'priority'>): Promise<void> {
    const valid = validateEnqueueOptions(change, '', false);
    const status = await this.store.reschedule(workflowId, {
      runAt: valid.runAt,
      delayMs: valid.delayMs,
      priority: change.priority === undefined ? null : valid.priority,
    });
    if (status === undefined) throw new WorkflowNotFoundError(workflowId);
    if (status !== 'ENQUEUED') {
      throw new InvalidArgumentError('workflowId', `names a workflow that is ${status}; only ENQUEUED workflows can be rescheduled`);
    }
  }

  /** Stops every process from starting workflows of this queue (enqueues still succeed) until `resumeQueue`. */
  async pauseQueue(queueName: string): Promise<void> {
    this.assertDeclared(queueName);
    await this.control.setPaused(queueName, true);
  }

  async resumeQueue(queueName: string): Promise<void> {
    this.assertDeclared(queueName);
    await this.control.setPaused(queueName, false);
  }

  /**
   * Changes a queue's limits at run time, for every process sharing the database (within a second; at once where
   * notifications arrive). A limit given as `null` goes back to its declared value; limits left out stay as they are.
   */
  async setQueueLimits(queueName: string, limits: { [K in keyof QueueLimits]?: QueueLimits[K] | null }): Promise<void> {
    this.assertDeclared(queueName);
    const unknown = unknownKey(limits ?? {}, QUEUE_LIMIT_KEYS);
    if (unknown) throw new InvalidArgumentError(`limits.${unknown.key}`, unknown.reason);
    const given = Object.fromEntries(Object.entries(limits ?? {}).filter(([, value]) => value !== null && value !== undefined));
    resolveLimits(queueName, given, 'limits.', (message) => {
      throw new InvalidArgumentError('limits', message);
    });
    await this.control.setLimits(queueName, limits);
  }

  /** The limits that apply to a queue now (declared, with run-time changes), and whether it is paused. */
  async getQueueSettings(queueName: string): Promise<QueueLimits & { paused: boolean }> {
    this.assertDeclared(queueName);
    await this.settings.refresh();
    const { name: _name, ...settings } = this.settings.effective(queueName);
    return settings;
  }

  private assertDeclared(queueName: string): void {
    if (!this.config.queues.has(queueName)) throw new UnknownQueueError(queueName, [...this.config.queues.keys()]);
  }

  /** Lists workflows, newest first. */
  async list(filter: ListWorkflowsOptions = {}): Promise<WorkflowStatusInfo[]> {
    const limit = filter.limit ?? 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT) {
      throw new InvalidArgumentError('filter.limit', `must be an integer from 1 to ${MAX_LIST_LIMIT}`);
    }
    return (await this.store.list({ ...filter, limit })).map(toStatusInfo);
  }

  private async prepare(
    queueName: string,
    workflow: WorkflowFunction | string,
    args: unknown,
    options: EnqueueOptions,
    optionsField: string,
    argsField = 'args',
  ): Promise<{ valid: ValidEnqueueOptions; row: NewWorkflow }> {
    this.assertDeclared(queueName);
    const workflowName = this.registry.resolveName(workflow);
    const workflowOptions = this.registry.runOptions(workflowName);
    const inputsJson = serialiseArgs(args, argsField);
    const valid = validateEnqueueOptions(options, queueName, await this.isPartitioned(queueName, options), optionsField);
    const row: NewWorkflow = {
      workflowId: valid.workflowId ?? randomUUID(),
      queueName,
      workflowName,
      deduplicationId: valid.deduplicationId,
      inputsJson,
      timeoutMs: valid.timeoutMs,
      maxAttempts: workflowOptions.maxAttempts,
      maxRecoveryAttempts: workflowOptions.maxRecoveryAttempts,
      partitionKey: valid.partitionKey,
      priority: valid.priority,
      runAt: valid.runAt,
      delayMs: valid.delayMs,
      deduplicationWindowMs: valid.deduplicationWindowMs,
      releaseKeyOnError: valid.releaseKeyOnError,
      traceContext: null,
    };
    return { valid, row };
  }

  /** Whether a queue takes partition keys; re-read from Postgres before saying no (limits change at run time). */
  private async isPartitioned(queueName: string, options: EnqueueOptions): Promise<boolean> {
    if (options?.partitionKey !== undefined && !isPartitioned(this.settings.effective(queueName))) {
      await this.settings.refresh();
    }
    return isPartitioned(this.settings.effective(queueName));
  }

  private async bulkOutcome(row: NewWorkflow, result: InsertResult, manager?: EntityManager): Promise<BulkEnqueueResult> {
    if (result.outcome === 'inserted') {
      this.enqueuer.inserted(row);
      return { status: 'created', workflowId: row.workflowId };
    }
    if (result.outcome === 'deduplicated' && result.holderId) {
      this.events.emit(
        {
          queueName: row.queueName,
          deduplicationId: row.deduplicationId as string,
          existingWorkflowId: result.holderId,
          outcome: 'rejected',
        },
        row.workflowName,
      );
      return { status: 'duplicate', workflowId: result.holderId };
    }
    try {
      const enqueued = await this.enqueuer.enqueue(row, { onDuplicate: 'reject', whenRunning: 'reject' }, manager, false);
      return { status: enqueued.created ? 'created' : 'existing', workflowId: enqueued.workflowId };
    } catch (error) {
      if (error instanceof QueueDeduplicatedError) return { status: 'duplicate', workflowId: error.existingWorkflowId };
      throw error;
    }
  }

  private handle<R>(workflowId: string): WorkflowHandle<R>;
  private handle<R>(workflowId: string, created: boolean): EnqueuedWorkflowHandle<R>;
  private handle<R>(workflowId: string, created?: boolean): WorkflowHandle<R> {
    return new QueueWorkflowHandle<R>(workflowId, this.store, this.completions, created ?? false);
  }
}
