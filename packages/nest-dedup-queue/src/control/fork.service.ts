import { Injectable } from '@nestjs/common';
import { DedupQueueConfig, assertQueueDeclared } from '../dedup-queue.config';
import { ForkCopy, ForkSource, ForkStore } from '../database/workflows/control/fork.store';
import type { NewWorkflow } from '../database/workflows/new-workflow';
import { type Query, QueueDatabase } from '../database/connection/queue-database';
import { WorkflowInserter } from '../database/workflows/enqueue/workflow-inserter';
import { WorkflowEnqueuer, type Enqueued } from '../enqueue/workflow-enqueuer';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { QueueDeduplicatedError } from '../errors/queue-deduplicated.error';
import { WorkflowNotFoundError } from '../errors/workflow-not-found.error';
import type { ForkManyOptions, ForkOptions, ForkResult } from '../interfaces/fork-options.interface';
import type { TransactionSql } from '../interfaces/transaction-sql.interface';
import type { EnqueuedWorkflowHandle } from '../interfaces/workflow-handle.interface';
import { ACTIVE_WORKFLOW_STATUSES } from '../interfaces/workflow-status.interface';
import { optionalKey, optionalVersion } from '../utils/enqueue-options.validation';
import { unknownKey } from '../utils/known-keys';
import { WorkflowHandleFactory } from '../workflow-handle.factory';
import { logicalQueueName } from '../utils/queue-shards';

/** A fork's options, checked. */
interface ValidForkOptions {
  fromStep: number | 'last-failure';
  workflowId: string | null;
  version: number | null;
  onDuplicate: 'reject' | 'return-existing' | 'supersede';
}

/** A fork whose ID names a workflow already: the transaction that would have made it is rolled back. */
class ForkExists extends Error {
  constructor(readonly enqueued: Enqueued) {
    super('the fork exists already');
  }
}

/** A fork to make: its source, where it starts, and its row. */
interface PlannedFork {
  source: ForkSource;
  fromStep: number;
  row: NewWorkflow;
}

const FORK_OPTION_KEYS: readonly (keyof ForkOptions)[] = ['fromStep', 'workflowId', 'version', 'onDuplicate'];
const FORK_MANY_OPTION_KEYS: readonly (keyof ForkOptions)[] = ['fromStep', 'version', 'onDuplicate'];
const MAX_POSITION = 2_147_483_647;

/**
 * Forks finished and dead-lettered workflows: a new workflow with the source's name, version (or another),
 * arguments, queue and deduplication ID, whose recorded positions before its start position are copied from the
 * source in the transaction that inserts it (so no worker can claim it before they are there), and which runs its
 * code from that position with a fresh retry budget. `QueueService.fork` and `forkMany` (through
 * `BulkControlService`) delegate here.
 */
@Injectable()
export class ForkService {
  constructor(
    private readonly config: DedupQueueConfig,
    private readonly database: QueueDatabase,
    private readonly store: ForkStore,
    private readonly enqueuer: WorkflowEnqueuer,
    private readonly inserter: WorkflowInserter,
    private readonly handles: WorkflowHandleFactory,
  ) {}

  /** See `QueueService.fork`. */
  async fork<R = unknown>(workflowId: string, options: ForkOptions = {}): Promise<EnqueuedWorkflowHandle<R>> {
    if (typeof workflowId !== 'string' || workflowId === '') {
      throw new InvalidArgumentError('workflowId', 'must be a non-empty string');
    }
    const valid = validForkOptions(options, FORK_OPTION_KEYS, ['reject', 'return-existing', 'supersede']);
    const source = await this.store.byId(workflowId);
    if (!source) throw new WorkflowNotFoundError(workflowId);
    assertQueueDeclared(this.config, logicalQueueName(source.queueName));
    if (!isForkable(source)) {
      throw new InvalidArgumentError(
        'workflowId',
        `names a workflow that is ${source.status}; only finished (SUCCESS, ERROR, CANCELLED) or dead-lettered ` +
          `workflows can be forked (cancel it first to fork a running one)`,
      );
    }
    const enqueued = await this.forkOne(planFork(source, valid), valid.onDuplicate);
    return this.handles.handle<R>(enqueued.workflowId, enqueued.created, logicalQueueName(source.queueName));
  }

  /**
   * Forks one batch of sources of one queue (see `QueueService.forkMany`), in their order: each source that has
   * not finished is `not-forkable`; with `'reject'` the others are forked in one transaction, with `'supersede'`
   * one at a time.
   */
  async forkBatch(queueName: string, sources: ForkSource[], options: ForkManyOptions): Promise<ForkResult[]> {
    const valid = validForkManyOptions(options);
    const plans = sources.filter(isForkable).map((source) => planFork(source, valid));
    const done = new Map<string, ForkResult>();
    if (valid.onDuplicate === 'supersede') {
      for (const plan of plans) done.set(plan.source.workflowId, forked(plan, await this.forkOne(plan, 'supersede')));
    } else {
      for (const result of await this.forkAll(queueName, plans)) done.set(result.workflowId, result);
    }
    return sources.map(
      (source) => done.get(source.workflowId) ?? { workflowId: source.workflowId, outcome: 'not-forkable' },
    );
  }

  /**
   * One fork, under any duplicate policy, through the enqueuer in the transaction that copies its records. A fork of
   * the default ID is made once per source and start: the source is locked, and a fork found is returned.
   */
  private async forkOne(plan: PlannedFork, onDuplicate: ValidForkOptions['onDuplicate']): Promise<Enqueued> {
    const { source, row } = plan;
    try {
      return await this.database.transaction(async (query) => {
        if (!row.workflowIdGiven) {
          await this.store.lockSources(query, source.queueName, [source.workflowId]);
          const found = await this.store.existing(query, source.queueName, [row.workflowId]);
          if (found.size > 0) throw new ForkExists({ workflowId: row.workflowId, created: false });
        }
        if (source.holdsKey) await this.store.releaseKeys(query, source.queueName, [source.workflowId]);
        const result = await this.enqueuer.enqueue(row, { onDuplicate, whenRunning: 'reject' }, asTransaction(query));
        if (!result.created || result.workflowId !== row.workflowId) throw new ForkExists(result);
        await this.store.copyRecords(query, source.queueName, [copyOf(plan)]);
        return result;
      });
    } catch (error) {
      if (error instanceof ForkExists) return error.enqueued;
      throw error;
    }
  }

  /**
   * Forks of one queue under `'reject'`, in one transaction: the sources are locked (see `forkOne`), the forks that
   * exist already are left out, parked sources let go of their keys, the rest are inserted in one statement and get
   * their records.
   */
  private async forkAll(queueName: string, plans: PlannedFork[]): Promise<ForkResult[]> {
    if (plans.length === 0) return [];
    const results: ForkResult[] = [];
    const inserted = await this.database.transaction(async (query) => {
      await this.store.lockSources(
        query,
        queueName,
        plans.map((plan) => plan.source.workflowId),
      );
      const existing = await this.store.existing(
        query,
        queueName,
        plans.map((plan) => plan.row.workflowId),
      );
      const fresh = plans.filter((plan) => {
        if (!existing.has(plan.row.workflowId)) return true;
        results.push({ workflowId: plan.source.workflowId, outcome: 'existing', forkWorkflowId: plan.row.workflowId });
        return false;
      });
      const parked = fresh.filter((plan) => plan.source.holdsKey).map((plan) => plan.source.workflowId);
      await this.store.releaseKeys(query, queueName, parked);
      const outcomes = await this.inserter.inTransaction(asTransaction(query)).insertMany(fresh.map((p) => p.row));
      const made = fresh.filter((_, at) => outcomes[at].outcome === 'inserted');
      await this.store.copyRecords(query, queueName, made.map(copyOf));
      return fresh.map((plan, at) => ({ plan, outcome: outcomes[at] }));
    });
    for (const { plan, outcome } of inserted) {
      const { source, row } = plan;
      if (outcome.outcome === 'inserted') {
        this.enqueuer.inserted(row);
        results.push({ workflowId: source.workflowId, outcome: 'forked', forkWorkflowId: row.workflowId });
      } else if (outcome.outcome === 'duplicate-workflow-id') {
        results.push({ workflowId: source.workflowId, outcome: 'existing', forkWorkflowId: row.workflowId });
      } else if (outcome.outcome === 'deduplicated') {
        results.push({ workflowId: source.workflowId, outcome: 'key-held' });
      } else {
        results.push(await this.forkOneReporting(plan));
      }
    }
    return results;
  }

  /** A fork the batch could not settle (it collided with a row not yet visible): alone, reported as a result. */
  private async forkOneReporting(plan: PlannedFork): Promise<ForkResult> {
    try {
      return forked(plan, await this.forkOne(plan, 'reject'));
    } catch (error) {
      if (error instanceof QueueDeduplicatedError) return { workflowId: plan.source.workflowId, outcome: 'key-held' };
      throw error;
    }
  }
}

/** A source that may be forked: finished, or dead-lettered. */
function isForkable(source: ForkSource): boolean {
  return !ACTIVE_WORKFLOW_STATUSES.includes(source.status);
}

function forked(plan: PlannedFork, enqueued: Enqueued): ForkResult {
  return {
    workflowId: plan.source.workflowId,
    outcome: enqueued.created ? 'forked' : 'existing',
    forkWorkflowId: enqueued.workflowId,
  };
}

/** Where a fork of `source` starts. */
function startOf(source: ForkSource, fromStep: ValidForkOptions['fromStep']): number {
  return fromStep === 'last-failure' ? source.lastFailure : fromStep;
}

/** The default ID of a fork: the same for the same source and start, so a retried call finds its fork. */
function defaultForkId(source: ForkSource, fromStep: number): string {
  return `${source.workflowId}-fork-${fromStep}`;
}

/**
 * A fork of `source`: where it starts, and its row (the source's workflow as it was enqueued, with a fresh budget,
 * naming its source).
 */
function planFork(source: ForkSource, options: ValidForkOptions): PlannedFork {
  const fromStep = startOf(source, options.fromStep);
  return { source, fromStep, row: forkRow(source, options, fromStep) };
}

/**
 * A fork's row. NOTE: a default ID is not "given": no workflow has it (the source is locked and its forks looked up
 * first), so the insert leaves out the look-up of a given ID in every queue and day of the history.
 */
function forkRow(source: ForkSource, options: ValidForkOptions, fromStep: number): NewWorkflow {
  return {
    workflowId: options.workflowId ?? defaultForkId(source, fromStep),
    workflowIdGiven: options.workflowId !== null,
    queueName: source.queueName,
    workflowName: source.workflowName,
    version: options.version ?? source.version,
    deduplicationId: source.deduplicationId,
    inputsJson: source.inputsJson,
    timeoutMs: source.timeoutMs,
    deadlineAt: null,
    maxAttempts: source.maxAttempts,
    maxRecoveryAttempts: source.maxRecoveryAttempts,
    partitionKey: source.partitionKey,
    priority: source.priority,
    runAt: null,
    delayMs: null,
    maxDelayMs: null,
    deduplicationWindowMs: source.deduplicationWindowMs,
    releaseKeyOnError: source.releaseKeyOnError,
    traceContext: null,
    parentWorkflowId: null,
    forkedFrom: source.workflowId,
  };
}

function copyOf(plan: PlannedFork): ForkCopy {
  return { forkId: plan.row.workflowId, sourceId: plan.source.workflowId, fromStep: plan.fromStep };
}

/** A transaction of the module's own, as the enqueuer takes a caller's. */
function asTransaction(query: Query): TransactionSql {
  return { executeSql: async (text, values) => ({ rows: await query(text, values) }) };
}

/** `forkMany`'s options, checked. @throws InvalidArgumentError */
export function validForkManyOptions(options: ForkManyOptions): ValidForkOptions {
  return validForkOptions(options, FORK_MANY_OPTION_KEYS, ['reject', 'supersede']);
}

/** `fork`'s (or `forkMany`'s) options, checked against the keys and duplicate policies that call takes. */
function validForkOptions(
  options: ForkOptions,
  keys: readonly (keyof ForkOptions)[],
  policies: readonly ValidForkOptions['onDuplicate'][],
): ValidForkOptions {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new InvalidArgumentError('options', 'must be an object');
  }
  const unknown = unknownKey(options, keys);
  if (unknown) throw new InvalidArgumentError(`options.${unknown.key}`, unknown.reason);
  const { fromStep = 'last-failure', onDuplicate = 'reject' } = options;
  if (fromStep !== 'last-failure' && !(Number.isInteger(fromStep) && fromStep >= 0 && fromStep <= MAX_POSITION)) {
    throw new InvalidArgumentError('options.fromStep', "must be a position (an integer, 0 or more) or 'last-failure'");
  }
  if (!policies.includes(onDuplicate)) {
    throw new InvalidArgumentError('options.onDuplicate', `must be one of ${policies.map((p) => `'${p}'`).join(', ')}`);
  }
  return {
    fromStep,
    workflowId: optionalKey(options.workflowId, 'options.workflowId'),
    version: optionalVersion(options.version, 'options.version'),
    onDuplicate,
  };
}
