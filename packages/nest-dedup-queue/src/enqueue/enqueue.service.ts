import { Injectable } from '@nestjs/common';
import { DedupQueueConfig, assertQueueDeclared, isPartitioned } from '../dedup-queue.config';
import type { NewWorkflow } from '../database/workflows/new-workflow';
import type { InsertResult } from '../database/workflows/enqueue/insert-results';
import { WorkflowInserter } from '../database/workflows/enqueue/workflow-inserter';
import { WorkflowRegistry } from '../discovery/workflow.registry';
import { WorkflowVersionStore } from '../database/versions/workflow-versions.store';
import { executionFrames } from '../execution/execution-frames';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { QueueDeduplicatedError } from '../errors/queue-deduplicated.error';
import type { BulkEnqueueItem, BulkEnqueueOptions, BulkEnqueueResult } from '../interfaces/bulk-enqueue.interface';
import type { EnqueueOptions } from '../interfaces/enqueue-options.interface';
import type { TransactionSql } from '../interfaces/transaction-sql.interface';
import type { EnqueuedWorkflowHandle } from '../interfaces/workflow-handle.interface';
import type { WorkflowFunction } from '../interfaces/workflow-function.interface';
import { WorkflowTracer } from '../observability/workflow.tracer';
import { QueueSettings } from '../queue-settings';
import { ValidEnqueueOptions, serialiseArgs, validateEnqueueOptions } from '../utils/enqueue-options.validation';
import { WorkflowHandleFactory } from '../workflow-handle.factory';
import { DeduplicationEvents } from './deduplication-events';
import { WorkflowEnqueuer } from './workflow-enqueuer';
import { newWorkflowId } from '../utils/workflow-id';
import { storedQueueName } from '../utils/queue-shards';

const BULK_CHUNK = 1000;

/** `enqueueMany`'s duplicate policy: `'reject'` (reported as `duplicate`) unless the call says `'supersede'`. */
function bulkPolicy(options: BulkEnqueueOptions): 'reject' | 'supersede' {
  const policy = options.onDuplicate ?? 'reject';
  if (policy !== 'reject' && policy !== 'supersede') {
    throw new InvalidArgumentError('options.onDuplicate', "must be 'reject' or 'supersede' in enqueueMany");
  }
  return policy;
}

/** The options of `enqueue` that an `enqueueMany` item does not take: the call's options, or none at all. */
const NOT_PER_ITEM: ReadonlyArray<{ options: readonly (keyof EnqueueOptions)[]; hint: string }> = [
  {
    options: ['onDuplicate', 'manager', 'db'],
    hint: 'is an option of the whole call: enqueueMany(queue, workflow, items, { onDuplicate, manager, db })',
  },
  { options: ['whenRunning', 'requireSameArgs', 'maxDelayMs'], hint: 'is not taken by enqueueMany' },
];

function assertBulkItemOptions(given: EnqueueOptions, index: number): void {
  for (const { options, hint } of NOT_PER_ITEM) {
    const option = options.find((name) => given[name] !== undefined);
    if (option !== undefined) throw new InvalidArgumentError(`items[${index}].options.${option}`, hint);
  }
}

/**
 * Enqueues workflows, one or many: validates everything first, builds the rows and hands them to the enqueuer (one)
 * or the inserter (many, in chunks). `QueueService.enqueue` and `enqueueMany` delegate here.
 */
@Injectable()
export class EnqueueService {
  constructor(
    private readonly config: DedupQueueConfig,
    private readonly registry: WorkflowRegistry,
    private readonly settings: QueueSettings,
    private readonly inserter: WorkflowInserter,
    private readonly enqueuer: WorkflowEnqueuer,
    private readonly events: DeduplicationEvents,
    private readonly tracer: WorkflowTracer,
    private readonly handles: WorkflowHandleFactory,
    private readonly versions: WorkflowVersionStore,
  ) {}

  /** See `QueueService.enqueue`. */
  async enqueue(
    queueName: string,
    workflow: WorkflowFunction | string,
    args: unknown[],
    options: EnqueueOptions = {},
  ): Promise<EnqueuedWorkflowHandle<unknown>> {
    const { valid, row } = await this.prepare(queueName, workflow, args, options, 'options');
    const enqueued = await this.enqueuer.enqueue(row, valid, valid.transaction);
    // NOTE: a workflow ID reused with another key may be stored in another shard of the queue: looked up by ID alone.
    const sameShard = enqueued.created || enqueued.workflowId !== row.workflowId || row.queueName === queueName;
    return this.handles.handle(enqueued.workflowId, enqueued.created, sameShard ? row.queueName : undefined);
  }

  /** The default queue of a workflow, `@Workflow({ queue })`. @throws InvalidArgumentError when it has none */
  defaultQueue(workflow: WorkflowFunction | string): string {
    return this.registry.defaultQueue(workflow);
  }

  /** See `QueueService.enqueueMany`. */
  async enqueueMany(
    queueName: string,
    workflow: WorkflowFunction | string,
    items: BulkEnqueueItem[],
    options: BulkEnqueueOptions = {},
  ): Promise<BulkEnqueueResult[]> {
    if (!Array.isArray(items)) throw new InvalidArgumentError('items', 'must be an array of { args, options? }');
    bulkPolicy(options ?? {});
    const prepared = [];
    for (const [index, item] of items.entries()) {
      assertBulkItemOptions(item?.options ?? {}, index);
      prepared.push(
        await this.prepare(
          queueName,
          workflow,
          item?.args,
          { ...item?.options, manager: options.manager, db: options.db },
          `items[${index}].options`,
          `items[${index}].args`,
        ),
      );
    }
    const ids = new Set<string>();
    const keys = new Set<string>();
    const superseding = bulkPolicy(options) === 'supersede';
    prepared.forEach(({ row }, index) => {
      if (ids.has(row.workflowId))
        throw new InvalidArgumentError(`items[${index}].options.workflowId`, "repeats an earlier item's workflowId");
      ids.add(row.workflowId);
      if (superseding && row.deduplicationId !== null) {
        if (keys.has(row.deduplicationId)) {
          throw new InvalidArgumentError(
            `items[${index}].options.deduplicationId`,
            "repeats an earlier item's deduplicationId, which onDuplicate: 'supersede' would cancel at once",
          );
        }
        keys.add(row.deduplicationId);
      }
    });
    const rows = prepared.map(({ row }) => row);
    const transaction = prepared[0]?.valid.transaction;
    return this.tracer.send(queueName, rows, () =>
      superseding ? this.supersedeEach(rows, transaction) : this.insertInChunks(rows, transaction),
    );
  }

  /** `enqueueMany` with `onDuplicate: 'supersede'`: each item in its own transaction (or savepoint), in order. */
  private async supersedeEach(rows: NewWorkflow[], transaction?: TransactionSql): Promise<BulkEnqueueResult[]> {
    const results: BulkEnqueueResult[] = [];
    for (const row of rows) {
      try {
        const enqueued = await this.enqueuer.enqueue(
          row,
          { onDuplicate: row.deduplicationId === null ? 'reject' : 'supersede', whenRunning: 'reject' },
          transaction,
          false,
        );
        results.push({
          status: enqueued.created ? 'created' : 'existing',
          workflowId: enqueued.workflowId,
          ...(enqueued.supersededWorkflowId ? { supersededWorkflowId: enqueued.supersededWorkflowId } : {}),
        });
      } catch (error) {
        if (!(error instanceof QueueDeduplicatedError)) throw error;
        results.push({ status: 'duplicate', workflowId: error.existingWorkflowId });
      }
    }
    return results;
  }

  private async insertInChunks(rows: NewWorkflow[], transaction?: TransactionSql): Promise<BulkEnqueueResult[]> {
    const inserter = transaction ? this.inserter.inTransaction(transaction) : this.inserter;
    const results: BulkEnqueueResult[] = [];
    for (let start = 0; start < rows.length; start += BULK_CHUNK) {
      const chunk = rows.slice(start, start + BULK_CHUNK);
      const inserted = await inserter.insertMany(chunk);
      for (const [index, result] of inserted.entries()) {
        results.push(await this.bulkOutcome(chunk[index], result, transaction));
      }
    }
    return results;
  }

  private async prepare(
    queueName: string,
    workflow: WorkflowFunction | string,
    args: unknown,
    options: EnqueueOptions,
    optionsField: string,
    argsField = 'args',
  ): Promise<{ valid: ValidEnqueueOptions; row: NewWorkflow }> {
    assertQueueDeclared(this.config, queueName);
    const workflowName = this.registry.resolveName(workflow);
    const inputsJson = serialiseArgs(args, argsField, this.config.inputLimits);
    const partitioned = isPartitioned(this.settings.effective(queueName));
    const valid = validateEnqueueOptions(
      options,
      queueName,
      partitioned || options?.partitionKey === undefined ? partitioned : await this.isPartitionedNow(queueName),
      optionsField,
    );
    const version =
      valid.version ?? this.registry.highestVersion(workflowName) ?? (await this.versionToEnqueue(workflowName));
    const workflowOptions = this.registry.runOptions(workflowName, version);
    const frame = executionFrames.getStore();
    const workflowId = valid.workflowId ?? newWorkflowId();
    const row: NewWorkflow = {
      workflowId,
      workflowIdGiven: typeof valid.workflowId === 'string',
      queueName: storedQueueName(this.config, queueName, valid.deduplicationId ?? workflowId),
      workflowName,
      version,
      deduplicationId: valid.deduplicationId,
      inputsJson,
      timeoutMs: valid.timeoutMs,
      // NOTE: a child enqueued without its own timeoutMs (undefined, not null) inherits its parent's deadline.
      deadlineAt: options?.timeoutMs === undefined ? (frame?.execution.deadlineAt ?? null) : null,
      maxAttempts: workflowOptions.maxAttempts,
      maxRecoveryAttempts: workflowOptions.maxRecoveryAttempts,
      partitionKey: valid.partitionKey,
      priority: valid.priority,
      runAt: valid.runAt,
      delayMs: valid.delayMs,
      maxDelayMs: valid.maxDelayMs,
      deduplicationWindowMs: valid.deduplicationWindowMs,
      releaseKeyOnError: valid.releaseKeyOnError,
      traceContext: null,
      parentWorkflowId: frame?.execution.context.workflowId ?? null,
      forkedFrom: null,
    };
    return { valid, row };
  }

  /**
   * The version a run records when the caller gives none: the highest this process registers, else (a workflow it
   * does not have) the highest a live executor registers, else the highest any process ever registered, else 1.
   */
  async versionToEnqueue(workflowName: string): Promise<number> {
    return (
      this.registry.highestVersion(workflowName) ??
      (await this.versions.highestRegisteredVersion(workflowName, this.config.leaseMs)) ??
      1
    );
  }

  /**
   * Whether a queue takes partition keys, re-read from Postgres: a key was given for a queue that did not take them
   * (limits change at run time).
   */
  private async isPartitionedNow(queueName: string): Promise<boolean> {
    await this.settings.refresh();
    return isPartitioned(this.settings.effective(queueName));
  }

  private async bulkOutcome(
    row: NewWorkflow,
    result: InsertResult,
    transaction?: TransactionSql,
  ): Promise<BulkEnqueueResult> {
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
      const enqueued = await this.enqueuer.enqueue(
        row,
        { onDuplicate: 'reject', whenRunning: 'reject' },
        transaction,
        false,
      );
      return { status: enqueued.created ? 'created' : 'existing', workflowId: enqueued.workflowId };
    } catch (error) {
      if (error instanceof QueueDeduplicatedError) return { status: 'duplicate', workflowId: error.existingWorkflowId };
      throw error;
    }
  }
}
