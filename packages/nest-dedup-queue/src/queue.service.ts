import { Injectable } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { MAX_KEY_LENGTH } from './dedup-queue.constants';
import { DedupQueueConfig } from './dedup-queue.config';
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
import type { ListWorkflowsOptions } from './interfaces/list-workflows-options.interface';
import type { WorkflowHandle } from './interfaces/workflow-handle.interface';
import type { WorkflowStatus, WorkflowStatusInfo } from './interfaces/workflow-status.interface';
import { QueueWorkflowHandle } from './queue-workflow.handle';
import { UnstorableValueError, toStoredJson } from './utils/stored-json';
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
    if (!this.config.queues.has(queueName)) {
      throw new UnknownQueueError(queueName, [...this.config.queues.keys()]);
    }
    const workflowName = this.registry.resolveName(workflow);
    const workflowOptions = this.registry.find(workflowName)?.options ?? {};
    if (!Array.isArray(args)) {
      throw new InvalidArgumentError('args', 'must be an array of the workflow\'s arguments');
    }
    if (options === null || typeof options !== 'object') {
      throw new InvalidArgumentError('options', 'must be an object');
    }
    const deduplicationId = optionalKey(options.deduplicationId, 'options.deduplicationId');
    const workflowId = optionalKey(options.workflowId, 'options.workflowId') ?? randomUUID();
    const timeoutMs = optionalTimeout(options.timeoutMs);
    const inputsJson = serialiseArgs(args);
    const row = {
      workflowId,
      queueName,
      workflowName,
      deduplicationId,
      inputsJson,
      timeoutMs,
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

function optionalKey(value: unknown, field: string): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string') throw new InvalidArgumentError(field, `must be a string, got ${typeof value}`);
  if (value.length === 0) throw new InvalidArgumentError(field, 'must not be empty');
  if (value.includes('\u0000')) throw new InvalidArgumentError(field, 'must not contain the NUL character');
  if (value.length > MAX_KEY_LENGTH) {
    throw new InvalidArgumentError(field, `must be at most ${MAX_KEY_LENGTH} characters, got ${value.length}`);
  }
  return value;
}

function optionalTimeout(value: unknown): number | null {
  if (value === undefined || value === null) return null;
  if (!Number.isInteger(value) || (value as number) < 1 || (value as number) > 2_147_483_647) {
    throw new InvalidArgumentError('options.timeoutMs', 'must be a positive integer number of milliseconds');
  }
  return value as number;
}

function serialiseArgs(args: unknown[]): string {
  try {
    return toStoredJson(args, 'args');
  } catch (error) {
    if (error instanceof UnstorableValueError) throw new InvalidArgumentError(error.path, error.reason);
    throw error;
  }
}
