import { Injectable } from '@nestjs/common';
import { createHash } from 'node:crypto';
import { ChildWorkflowStore } from './database/workflows/control/child-workflow.store';
import { WorkflowRegistry } from './discovery/workflow.registry';
import { BulkControlService } from './control/bulk-control.service';
import { WorkflowControlService } from './control/workflow-control.service';
import { EnqueueService } from './enqueue/enqueue.service';
import { ChildKeyHeldByParentError } from './errors/child-key-held-by-parent.error';
import { type FramedExecution, executionFrames } from './execution/execution-frames';
import type { BulkEnqueueItem, BulkEnqueueOptions, BulkEnqueueResult } from './interfaces/bulk-enqueue.interface';
import type { CancelOptions } from './interfaces/cancel-options.interface';
import type { EnqueueOptions } from './interfaces/enqueue-options.interface';
import type { EnqueuedWorkflowHandle } from './interfaces/workflow-handle.interface';
import type { WorkflowFunction } from './interfaces/workflow-function.interface';
import type { WorkflowStatus } from './interfaces/workflow-status.interface';
import { characterLength } from './utils/character-length';
import { WorkflowHandleFactory } from './workflow-handle.factory';

/** The longest workflow ID an enqueue takes (see `enqueue-options.validation`). */
const MAX_WORKFLOW_ID_CHARACTERS = 255;

/**
 * The ID of the child enqueued at `position` (and `item`, in a batch) of a parent: `<parent>-<position>[-<item>]`, or
 * the same with the SHA-256 of the parent's ID when that would be longer than a workflow ID may be.
 */
export function childWorkflowId(parentWorkflowId: string, position: number, item?: number): string {
  const suffix = item === undefined ? `-${position}` : `-${position}-${item}`;
  const id = `${parentWorkflowId}${suffix}`;
  return characterLength(id) <= MAX_WORKFLOW_ID_CHARACTERS
    ? id
    : `${createHash('sha256').update(parentWorkflowId).digest('hex')}${suffix}`;
}

/** What the parent records of one child enqueue: the handle's workflow and whether this parent created it. */
interface RecordedEnqueue {
  workflowId: string;
  created: boolean;
}

/**
 * Enqueues made inside a running workflow (outside its steps): each is recorded at the parent's position, in the
 * transaction that inserts the child and holds the parent's row (`WorkflowExecution.runRecorded`), so that a
 * re-executed parent gets the same child (or the same `QueueDeduplicatedError`) and writes nothing, and a parent
 * cancelled or recovered meanwhile inserts no child. A child's ID is derived from its parent's (`<parent>-<position>`,
 * or `<parent>-<position>-<item>` in a batch) unless the caller gives one. Elsewhere (outside a workflow, inside a
 * step, in a caller's transaction) enqueues pass straight through. Cancels of a tree go through here too.
 */
@Injectable()
export class ChildWorkflows {
  constructor(
    private readonly enqueuing: EnqueueService,
    private readonly registry: WorkflowRegistry,
    private readonly handles: WorkflowHandleFactory,
    private readonly store: ChildWorkflowStore,
    private readonly control: WorkflowControlService,
    private readonly bulk: BulkControlService,
  ) {}

  /**
   * See `QueueService.cancel`: cancels the workflow, then (with `cancelChildren`) every unfinished descendant, to any
   * depth (`BulkControlService.cancelDescendants`). Returns the workflow's status afterwards.
   */
  async cancel(workflowId: string, options: CancelOptions = {}): Promise<WorkflowStatus> {
    const status = await this.control.cancel(workflowId);
    if (options?.cancelChildren === true) await this.bulk.cancelDescendants(workflowId);
    return status;
  }

  /** See `QueueService.enqueue`. */
  async enqueue(
    queueName: string,
    workflow: WorkflowFunction | string,
    args: unknown[],
    options: EnqueueOptions = {},
  ): Promise<EnqueuedWorkflowHandle<unknown>> {
    const parent = this.recordingParent(options);
    if (!parent) return this.enqueuing.enqueue(queueName, workflow, args, options);
    const derivedId = childWorkflowId(parent.context.workflowId, parent.nextStep);
    // NOTE: nothing may be awaited between reading nextStep and runRecorded taking that position.
    const recorded = await parent.runRecorded(`enqueue ${this.nameOf(workflow)}`, async (transaction) => {
      await this.refuseParentKey(parent, queueName, options.deduplicationId);
      const childId = typeof options.workflowId === 'string' ? options.workflowId : derivedId;
      const handle = await this.enqueuing.enqueue(queueName, workflow, args, {
        ...options,
        workflowId: childId,
        db: transaction,
      });
      return {
        workflowId: handle.workflowId,
        created: handle.created || (childId === derivedId && handle.workflowId === derivedId),
      } satisfies RecordedEnqueue;
    });
    return this.handles.handle(recorded.workflowId, recorded.created);
  }

  /** See `QueueService.enqueueMany`. Inside a workflow the whole batch is one recorded position. */
  async enqueueMany(
    queueName: string,
    workflow: WorkflowFunction | string,
    items: BulkEnqueueItem[],
    options: BulkEnqueueOptions = {},
  ): Promise<BulkEnqueueResult[]> {
    const parent = this.recordingParent(options);
    if (!parent || !Array.isArray(items)) return this.enqueuing.enqueueMany(queueName, workflow, items, options);
    const position = parent.nextStep;
    return parent.runRecorded(`enqueueMany ${this.nameOf(workflow)}`, async (transaction) => {
      const derived = items.map((item, index) =>
        typeof item?.options?.workflowId === 'string'
          ? undefined
          : childWorkflowId(parent.context.workflowId, position, index),
      );
      for (const item of items) {
        await this.refuseParentKey(parent, queueName, item?.options?.deduplicationId);
      }
      const withIds = items.map((item, index) => ({
        ...item,
        options: { ...item?.options, workflowId: derived[index] ?? item?.options?.workflowId },
      }));
      const results = await this.enqueuing.enqueueMany(queueName, workflow, withIds, { ...options, db: transaction });
      return results.map((result, index) =>
        result.status === 'existing' && result.workflowId === derived[index]
          ? { ...result, status: 'created' as const }
          : result,
      );
    });
  }

  /** The running workflow whose position an enqueue takes, or undefined when it is not recorded. */
  private recordingParent(options: EnqueueOptions | BulkEnqueueOptions): FramedExecution | undefined {
    const frame = executionFrames.getStore();
    if (!frame || frame.inStep || options?.db !== undefined || options?.manager !== undefined) return undefined;
    return frame.execution;
  }

  private nameOf(workflow: WorkflowFunction | string): string {
    try {
      return this.registry.resolveName(workflow);
    } catch {
      return typeof workflow === 'string' ? workflow : 'unknown';
    }
  }

  /** A child in the parent's queue with the key the parent holds could never start while the parent runs. */
  private async refuseParentKey(parent: FramedExecution, queueName: string, deduplicationId: unknown): Promise<void> {
    const { workflowId } = parent.context;
    if (queueName !== parent.context.queueName || typeof deduplicationId !== 'string') return;
    if ((await this.store.heldKey(parent.storedQueueName, workflowId)) === deduplicationId) {
      throw new ChildKeyHeldByParentError(workflowId, queueName, deduplicationId);
    }
  }
}
