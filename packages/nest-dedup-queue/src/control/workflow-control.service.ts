import { Injectable } from '@nestjs/common';
import { isUniqueViolationOn } from '../database/connection/sql-errors';
import { KeyHolderStore } from '../database/workflows/enqueue/key-holders.store';
import { ACTIVE_DEDUPLICATION_INDEX } from '../database/tables/workflow-tables';
import { WorkflowControlStore } from '../database/workflows/control/workflow-control.store';
import { WorkflowReadStore } from '../database/workflows/reads/workflow-reads.store';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { QueueDeduplicatedError } from '../errors/queue-deduplicated.error';
import { WorkflowNotFoundError } from '../errors/workflow-not-found.error';
import type { AbandonedRunInfo } from '../interfaces/abandoned-run.interface';
import type { EnqueueOptions } from '../interfaces/enqueue-options.interface';
import type { WorkflowHandle } from '../interfaces/workflow-handle.interface';
import type { WorkflowStatus } from '../interfaces/workflow-status.interface';
import { WorkflowLifecycle } from '../observability/workflow-lifecycle.events';
import { QueueScheduler } from '../scheduler/queue.scheduler';
import { validateEnqueueOptions } from '../utils/enqueue-options.validation';
import { WorkflowCompletions } from '../workflow-completions';
import { WorkflowHandleFactory } from '../workflow-handle.factory';
import { logicalQueueName } from '../utils/queue-shards';

/**
 * Acts on existing workflows: cancel, resume, reschedule, and the bodies a cancel or timeout abandoned in this
 * process. `QueueService`'s workflow-control methods delegate here.
 */
@Injectable()
export class WorkflowControlService {
  constructor(
    private readonly store: WorkflowControlStore,
    private readonly reads: WorkflowReadStore,
    private readonly holders: KeyHolderStore,
    private readonly completions: WorkflowCompletions,
    private readonly scheduler: QueueScheduler,
    private readonly lifecycle: WorkflowLifecycle,
    private readonly handles: WorkflowHandleFactory,
  ) {}

  /** See `QueueService.cancel`. */
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

  /** See `QueueService.abandonedRuns`. */
  abandonedRuns(): AbandonedRunInfo[] {
    return this.scheduler.abandonedRuns();
  }

  /** See `QueueService.resume`. */
  async resume<R = unknown>(workflowId: string): Promise<WorkflowHandle<R>> {
    let resumed;
    try {
      resumed = await this.store.resume(workflowId);
    } catch (error) {
      if (isUniqueViolationOn(error, ACTIVE_DEDUPLICATION_INDEX)) {
        const row = await this.reads.findRow(workflowId);
        const key = row?.deduplication_id as string;
        const queueName = row?.queue_name as string;
        const holder = await this.holders.findHolder(queueName, key);
        throw new QueueDeduplicatedError(
          logicalQueueName(queueName),
          key,
          holder?.workflowId ?? '(finished meanwhile; try again)',
          holder ? await this.holders.holderState(queueName, holder.workflowId) : {},
        );
      }
      throw error;
    }
    if (!resumed) throw new WorkflowNotFoundError(workflowId);
    if (resumed.before === 'SUCCESS' || resumed.before === 'ERROR') {
      throw new InvalidArgumentError(
        'workflowId',
        `names a workflow that ended with ${resumed.before}; only CANCELLED or MAX_RECOVERY_ATTEMPTS_EXCEEDED workflows can be resumed`,
      );
    }
    return this.handles.handle<R>(workflowId);
  }

  /** See `QueueService.reschedule`. */
  async reschedule(workflowId: string, change: Pick<EnqueueOptions, 'delayMs' | 'runAt' | 'priority'>): Promise<void> {
    const valid = validateEnqueueOptions(change, '', false);
    const status = await this.store.reschedule(workflowId, {
      runAt: valid.runAt,
      delayMs: valid.delayMs,
      priority: change.priority === undefined ? null : valid.priority,
    });
    if (status === undefined) throw new WorkflowNotFoundError(workflowId);
    if (status !== 'ENQUEUED') {
      throw new InvalidArgumentError(
        'workflowId',
        `names a workflow that is ${status}; only ENQUEUED workflows can be rescheduled`,
      );
    }
  }
}
