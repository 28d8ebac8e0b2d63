import { Injectable } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { DedupQueueConfig, isPartitioned, resolveLimits } from './dedup-queue.config';
import { QueueControlStore } from './database/queue-control.store';
import { QueueSettings } from './queue-settings';
import { toStatusInfo } from './database/workflow-row';
import { isUniqueViolationOn } from './database/sql-errors';
import { ACTIVE_DEDUPLICATION_INDEX, WorkflowStore } from './database/workflow.store';
import { WorkflowRegistry } from './discovery/workflow.registry';
import { InvalidArgumentError } from './errors/invalid-argument.error';
import { QueueDeduplicatedError } from './errors/queue-deduplicated.error';
import { UnknownQueueError } from './errors/unknown-queue.error';
import { WorkflowIdConflictError } from './errors/workflow-id-conflict.error';
import { WorkflowNotFoundError } from './errors/workflow-not-found.error';
import type { EnqueueOptions } from './interfaces/enqueue-options.interface';
import type { QueueLimits } from './interfaces/queue-options.interface';
import type { ListWorkflowsOptions } from './interfaces/list-workflows-options.interface';
import type { WorkflowHandle } from './interfaces/workflow-handle.interface';
import type { WorkflowStatus, WorkflowStatusInfo } from './interfaces/workflow-status.interface';
import { QueueWorkflowHandle } from './queue-workflow.handle';
import { serialiseArgs, validateEnqueueOptions } from './utils/enqueue-options.validation';
import { WorkflowCompletions } from './workflow-completions';

/** A `@Workflow()` method, as passed to `enqueue` by reference. */
export type WorkflowFunction = (...args: any[]) => unknown;

const MAX_LIST_LIMIT = 10_000;

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
  ) {}

  /**
   * Enqueues one run of a workflow. The row is written in one statement (one transaction) and workers are woken
   * on commit. Everything is validated before anything is written.
   *
   * @param queueName a queue declared in `DedupQueueModule.forRoot({ queues })`
   * @param workflow the `@Workflow()` method (`this.tasks.process`) or its registered name (`'UserTasks.process'`)
   * @param args the arguments, stored as JSON (see the README for what round-trips)
   * @param options `deduplicationId`, `workflowId`, `timeoutMs`
   * @throws QueueDeduplicatedError when `deduplicationId` is held by an ENQUEUED or PENDING workflow of the queue
   * @throws UnknownQueueError, UnknownWorkflowError, InvalidArgumentError, WorkflowIdConflictError
   */
  enqueue<F extends WorkflowFunction>(
    queueName: string,
    workflow: F,
    args: Parameters<F>,
    options?: EnqueueOptions,
  ): Promise<WorkflowHandle<Awaited<ReturnType<F>>>>;
  enqueue<R = unknown>(
    queueName: string,
    workflow: string,
    args: unknown[],
    options?: EnqueueOptions,
  ): Promise<WorkflowHandle<R>>;
  async enqueue(
    queueName: string,
    workflow: WorkflowFunction | string,
    args: unknown[],
    options: EnqueueOptions = {},
  ): Promise<WorkflowHandle<unknown>> {
    this.assertDeclared(queueName);
    const workflowName = this.registry.resolveName(workflow);
    const workflowOptions = this.registry.find(workflowName)?.options ?? {};
    const inputsJson = serialiseArgs(args);
    const valid = validateEnqueueOptions(options, queueName, isPartitioned(this.settings.effective(queueName)));
    const workflowId = valid.workflowId ?? randomUUID();
    const deduplicationId = valid.deduplicationId;
    const row = {
      ...valid,
      workflowId,
      queueName,
      workflowName,
      inputsJson,
      maxAttempts: workflowOptions.maxAttempts ?? 1,
      maxRecoveryAttempts: workflowOptions.maxRecoveryAttempts ?? this.config.maxRecoveryAttempts,
    };

    for (;;) {
      const inserted = await this.store.insert(row);
      if (inserted.outcome === 'inserted') {
        return this.handle(workflowId);
      }
      if (inserted.outcome === 'duplicate-workflow-id') {
        if (inserted.existing.queueName !== queueName || inserted.existing.workflowName !== workflowName) {
          throw new WorkflowIdConflictError(workflowId, inserted.existing);
        }
        return this.handle(workflowId);
      }
      const holder = await this.store.findHolder(queueName, deduplicationId as string);
      if (holder !== undefined) {
        throw new QueueDeduplicatedError(queueName, deduplicationId as string, holder);
      }
    }
  }

  /** A handle to an existing workflow. @throws WorkflowNotFoundError when no workflow has this ID. */
  async retrieve<R = unknown>(workflowId: string): Promise<WorkflowHandle<R>> {
    if (!(await this.store.findRow(workflowId))) {
      throw new WorkflowNotFoundError(workflowId);
    }
    return this.handle<R>(workflowId);
  }

  /**
   * Ends an ENQUEUED or PENDING workflow as CANCELLED and frees its deduplication ID at once. A body already
   * running is not interrupted, but its outcome is no longer recorded. A finished workflow keeps its status.
   * Resolves with the workflow's status afterwards.
   * @throws WorkflowNotFoundError when no workflow has this ID.
   */
  async cancel(workflowId: string): Promise<WorkflowStatus> {
    const status = await this.store.cancel(workflowId);
    if (status === undefined) {
      throw new WorkflowNotFoundError(workflowId);
    }
    if (status === 'CANCELLED') {
      this.completions.finished(workflowId);
    }
    return status;
  }

  /**
   * Puts a CANCELLED or dead-lettered (`MAX_RECOVERY_ATTEMPTS_EXCEEDED`) workflow back in its queue: it takes its
   * deduplication ID again, keeps its completed steps, and its recovery count starts over. Resuming an ENQUEUED or
   * PENDING workflow changes nothing.
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
        const holder = await this.store.findHolder(row?.queue_name as string, key);
        throw new QueueDeduplicatedError(row?.queue_name as string, key, holder ?? '(finished meanwhile; try again)');
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

  private handle<R>(workflowId: string): WorkflowHandle<R> {
    return new QueueWorkflowHandle<R>(workflowId, this.store, this.completions);
  }
}
