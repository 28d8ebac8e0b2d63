import { Injectable } from '@nestjs/common';
import type { NewWorkflow } from '../database/workflows/new-workflow';
import { isDeadlock } from '../database/connection/sql-errors';
import { DUPLICATE_TOPIC } from '../database/messages/message.store';
import type { Holder, HolderReport, SupersedeResult } from '../database/workflows/enqueue/insert-results';
import { WorkflowInserter } from '../database/workflows/enqueue/workflow-inserter';
import { KeyHolderStore } from '../database/workflows/enqueue/key-holders.store';
import { DuplicatePolicyStore } from '../database/workflows/enqueue/duplicate-policies.store';
import type { EnqueueConnection } from '../database/workflows/enqueue/enqueue-connection';
import { DeduplicationMismatchError } from '../errors/deduplication-mismatch.error';
import { QueueDeduplicatedError } from '../errors/queue-deduplicated.error';
import { WorkflowIdConflictError } from '../errors/workflow-id-conflict.error';
import type { DuplicatePolicy, WhenRunningPolicy } from '../interfaces/enqueue-options.interface';
import type { DeduplicationOutcome } from '../interfaces/deduplication-event.interface';
import type { TransactionSql } from '../interfaces/transaction-sql.interface';
import { afterCommitOf } from '../execution/recorded-transaction';
import { WorkflowLifecycle } from '../observability/workflow-lifecycle.events';
import { WorkflowTracer } from '../observability/workflow.tracer';
import { DeduplicationEvents } from './deduplication-events';
import { EnqueueBatcher } from './enqueue.batcher';
import { HolderReports } from './holder-reports';
import { SupersededRuns } from './superseded-runs';
import { WorkflowVersionsMonitor } from '../scheduler/workflow-versions.monitor';
import { logicalQueueName } from '../utils/queue-shards';

export interface EnqueuePolicy {
  onDuplicate: DuplicatePolicy;
  whenRunning: WhenRunningPolicy;
  /** Refuse a holder whose arguments differ (`DeduplicationMismatchError`), whatever the policy. */
  requireSameArgs?: boolean;
}

export interface Enqueued {
  workflowId: string;
  created: boolean;
  /** `onDuplicate: 'supersede'`: the holder that was cancelled, when the key was held. */
  supersededWorkflowId?: string;
}

const MAX_ROUNDS = 20;

/** The statements of one enqueue, on the module's pool or bound to the caller's transaction. */
interface EnqueueSql {
  inserter: WorkflowInserter;
  holders: KeyHolderStore;
  policies: DuplicatePolicyStore;
}

/**
 * Writes one workflow and applies the duplicate policy when its deduplication ID is held. The database decides
 * every conflict; when the holder it names has ended by the time it is looked at, the insert is simply tried again.
 */
@Injectable()
export class WorkflowEnqueuer {
  private readonly batcher: EnqueueBatcher;
  private readonly holderReports: HolderReports;

  constructor(
    private readonly inserter: WorkflowInserter,
    private readonly holders: KeyHolderStore,
    private readonly policies: DuplicatePolicyStore,
    private readonly events: DeduplicationEvents,
    private readonly lifecycle: WorkflowLifecycle,
    private readonly tracer: WorkflowTracer,
    private readonly superseded: SupersededRuns,
    private readonly versions: WorkflowVersionsMonitor,
  ) {
    this.batcher = new EnqueueBatcher(inserter);
    this.holderReports = new HolderReports(holders);
  }

  /**
   * Enqueues in a PRODUCER span (when traced), in the caller's `transaction` if given; `traced: false` when the
   * caller's bulk enqueue already has one.
   */
  enqueue(
    workflow: NewWorkflow,
    policy: EnqueuePolicy,
    transaction?: TransactionSql,
    traced = true,
  ): Promise<Enqueued> {
    const enqueue = () => this.enqueueOnce(workflow, policy, transaction);
    return traced ? this.tracer.send(workflow.queueName, [workflow], enqueue) : enqueue();
  }

  /** Tells the lifecycle about a workflow this process inserted. */
  inserted(workflow: NewWorkflow): void {
    if (!this.lifecycle.wants('enqueued')) return;
    const { workflowId, queueName, workflowName } = workflow;
    this.lifecycle.emit({ event: 'enqueued', workflowId, queueName, workflowName });
  }

  private async enqueueOnce(
    workflow: NewWorkflow,
    policy: EnqueuePolicy,
    transaction?: TransactionSql,
  ): Promise<Enqueued> {
    const bound = <T extends EnqueueConnection>(statements: T) =>
      transaction ? statements.inTransaction(transaction) : statements;
    const sql: EnqueueSql = {
      inserter: bound(this.inserter),
      holders: bound(this.holders),
      policies: bound(this.policies),
    };
    if (policy.onDuplicate === 'supersede' && workflow.deduplicationId !== null) {
      return this.supersede(sql, workflow, policy, transaction);
    }
    for (let round = 0; round < MAX_ROUNDS; round++) {
      const result = transaction ? await sql.inserter.insert(workflow) : await this.batcher.insert(workflow);
      switch (result.outcome) {
        case 'inserted':
          this.inserted(workflow);
          return { workflowId: workflow.workflowId, created: true };
        case 'duplicate-workflow-id':
          return alreadyEnqueued(workflow, result.existing);
        case 'deduplicated': {
          // NOTE: a deadlock victim wrote nothing: on the module's own connections the round starts over (as a
          // supersede or a batch does); in a caller's transaction, which it aborted, it is the caller's to retry.
          const resolved = await this.resolveDuplicate(sql, workflow, policy, result).catch((error: unknown) => {
            if (transaction === undefined && isDeadlock(error)) return undefined;
            throw error;
          });
          if (resolved) return resolved;
          break;
        }
      }
    }
    throw unsettled(workflow);
  }

  /**
   * `onDuplicate: 'supersede'`: the holder ends CANCELLED and this workflow takes the key in one transaction; tried
   * again while the key was free when looked at but taken by the time of the insert (or on a deadlock). In a
   * transaction, what this process does for the ended holders waits for its commit, when the module runs it (a
   * workflow body's recorded enqueue); a caller's own transaction leaves them to the cancel notification.
   */
  private async supersede(
    sql: EnqueueSql,
    workflow: NewWorkflow,
    policy: EnqueuePolicy,
    transaction: TransactionSql | undefined,
  ): Promise<Enqueued> {
    const afterCommit = transaction ? afterCommitOf(transaction) : (effect: () => void) => effect();
    for (let round = 0; round < MAX_ROUNDS; round++) {
      let result: SupersedeResult;
      try {
        result = await sql.policies.supersede(workflow, policy.requireSameArgs === true);
      } catch (error) {
        if (isDeadlock(error)) continue;
        throw error;
      }
      switch (result.outcome) {
        case 'inserted': {
          this.inserted(workflow);
          for (const ended of result.ended) {
            afterCommit?.(() => this.superseded.ended({ ...ended, queueName: workflow.queueName }));
          }
          const holder = result.ended.find((ended) => ended.heldKey);
          if (holder) this.hit(workflow, holder.workflowId, 'superseded', undefined);
          return {
            workflowId: workflow.workflowId,
            created: true,
            ...(holder ? { supersededWorkflowId: holder.workflowId } : {}),
          };
        }
        case 'mismatch':
          return this.refuse(workflow, result.holderId, 'mismatched');
        case 'window-held':
          return this.refuse(workflow, result.holderId, 'rejected');
        case 'workflow-id-taken': {
          const existing = await sql.inserter.insert(workflow);
          if (existing.outcome === 'duplicate-workflow-id') return alreadyEnqueued(workflow, existing.existing);
          break;
        }
        case 'retry':
          break;
      }
    }
    throw unsettled(workflow);
  }

  /**
   * Undefined when the holder is gone by now: the caller inserts again. The holder the insert saw (`refused`) decides
   * when the policy needs nothing more about it; a refusal then reports it as the insert read it, if it did.
   */
  private async resolveDuplicate(
    sql: EnqueueSql,
    workflow: NewWorkflow,
    policy: EnqueuePolicy,
    refused: { holderId?: string; holder?: HolderReport },
  ): Promise<Enqueued | undefined> {
    const requireSameArgs = policy.requireSameArgs === true;
    if (policy.onDuplicate === 'send') return this.sendToHolder(sql.policies, workflow, requireSameArgs);
    if (policy.onDuplicate === 'replace') {
      const replaced = await sql.policies.replaceQueued(workflow, requireSameArgs);
      if (replaced) return this.hit(workflow, replaced, 'replaced', { workflowId: replaced, created: false });
    }
    const seenByInsert = refused.holderId !== undefined && policy.onDuplicate !== 'replace' && !requireSameArgs;
    const holder: Holder | undefined = seenByInsert
      ? { workflowId: refused.holderId as string, status: 'PENDING', started: true }
      : await sql.holders.findHolder(
          workflow.queueName,
          workflow.deduplicationId as string,
          requireSameArgs ? workflow.inputsJson : undefined,
        );
    if (!holder) return undefined;
    if (holder.sameArgs === false) {
      return this.refuse(workflow, holder.workflowId, 'mismatched');
    }
    switch (this.modeFor(policy, holder)) {
      case 'retry':
        return undefined;
      case 'return-existing':
        return this.hit(workflow, holder.workflowId, 'returned-existing', {
          workflowId: holder.workflowId,
          created: false,
        });
      case 'queue-next': {
        const followUp = await sql.policies.upsertFollowUp(workflow);
        if (followUp?.created) this.inserted({ ...workflow, workflowId: followUp.workflowId });
        return followUp && this.hit(workflow, holder.workflowId, 'queued-next', followUp);
      }
      default:
        return this.refuse(workflow, holder.workflowId, 'rejected', seenByInsert ? refused.holder : undefined);
    }
  }

  /** `onDuplicate: 'send'`: the holder gets the arguments as a message; undefined when the key is free by now. */
  private async sendToHolder(
    policies: DuplicatePolicyStore,
    workflow: NewWorkflow,
    requireSameArgs: boolean,
  ): Promise<Enqueued | undefined> {
    const result = await policies.sendToHolder(workflow, DUPLICATE_TOPIC, requireSameArgs);
    switch (result.outcome) {
      case 'sent':
        return this.hit(workflow, result.holderId, 'sent', { workflowId: result.holderId, created: false });
      case 'mismatch':
        return this.refuse(workflow, result.holderId, 'mismatched');
      case 'window-held':
        return this.refuse(workflow, result.holderId, 'rejected');
      case 'free':
        return undefined;
    }
  }

  private modeFor(policy: EnqueuePolicy, holder: Holder): DuplicatePolicy | WhenRunningPolicy | 'retry' {
    if (policy.onDuplicate !== 'replace') return policy.onDuplicate;
    if (holder.status === 'ENQUEUED' && !holder.started) return 'retry';
    if (holder.status === 'ENQUEUED' || holder.status === 'PENDING' || holder.status === 'WAITING') {
      return policy.whenRunning;
    }
    return policy.whenRunning === 'return-existing' ? 'return-existing' : 'reject';
  }

  /**
   * Tells the hit and throws what the caller gets: `DeduplicationMismatchError` or `QueueDeduplicatedError`, the
   * latter with the holder's `report` when the insert read it, else as read now.
   */
  private async refuse(
    workflow: NewWorkflow,
    holderId: string,
    outcome: 'mismatched' | 'rejected',
    holderReport?: HolderReport,
  ): Promise<never> {
    this.hit(workflow, holderId, outcome, undefined);
    const key = workflow.deduplicationId as string;
    const queueName = logicalQueueName(workflow.queueName);
    if (outcome === 'mismatched') throw new DeduplicationMismatchError(queueName, key, holderId);
    const report = holderReport ?? (await this.holderReports.read(workflow.queueName, holderId));
    const note = await this.strandedNote(workflow, report?.waitingRun);
    throw new QueueDeduplicatedError(queueName, key, holderId, { ...report?.state, note });
  }

  /**
   * When the key's holder waits for a name and version that no live executor registers (it will not run until one
   * that does starts), says so; otherwise, or when that cannot be read now, nothing.
   */
  private async strandedNote(workflow: NewWorkflow, run: HolderReport['waitingRun']): Promise<string | undefined> {
    try {
      if (!run || (await this.versions.isClaimable(workflow.queueName, run.name, run.version))) return undefined;
      return (
        `it is a run of "${run.name}" version ${run.version}, which no live executor draining the queue registers: ` +
        `it will not run until a process that registers that version starts (queueService.listVersions())`
      );
    } catch {
      return undefined;
    }
  }

  private hit<T>(workflow: NewWorkflow, existingWorkflowId: string, outcome: DeduplicationOutcome, result: T): T {
    this.events.emit(
      {
        queueName: workflow.queueName,
        deduplicationId: workflow.deduplicationId as string,
        existingWorkflowId,
        outcome,
      },
      workflow.workflowName,
    );
    return result;
  }
}

/**
 * The answer to an enqueue whose workflow ID is taken: the same workflow (same queue and name) enqueued before, which
 * the caller gets back as not created; anything else under that ID is a `WorkflowIdConflictError`.
 */
function alreadyEnqueued(workflow: NewWorkflow, existing: { queueName: string; workflowName: string }): Enqueued {
  const queueName = logicalQueueName(existing.queueName);
  if (queueName !== logicalQueueName(workflow.queueName) || existing.workflowName !== workflow.workflowName) {
    throw new WorkflowIdConflictError(workflow.workflowId, { ...existing, queueName });
  }
  return { workflowId: workflow.workflowId, created: false };
}

/** An enqueue that met a new conflict in each of its `MAX_ROUNDS` rounds. */
function unsettled(workflow: NewWorkflow): Error {
  return new Error(`Enqueue of workflow ${workflow.workflowId} did not settle after ${MAX_ROUNDS} rounds of conflicts`);
}
