import { Injectable } from '@nestjs/common';
import { DedupQueueConfig, assertQueueDeclared } from '../dedup-queue.config';
import { KeyHolderStore } from '../database/workflows/enqueue/key-holders.store';
import { toStatusInfo } from '../database/workflows/workflow-row';
import { WorkflowReadStore } from '../database/workflows/reads/workflow-reads.store';
import { DeduplicationEvents } from '../enqueue/deduplication-events';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { WorkflowNotFoundError } from '../errors/workflow-not-found.error';
import type { DeduplicationEvent } from '../interfaces/deduplication-event.interface';
import type { ListWorkflowsOptions } from '../interfaces/list-workflows-options.interface';
import type { WorkflowHandle } from '../interfaces/workflow-handle.interface';
import type { WorkflowStatus, WorkflowStatusInfo } from '../interfaces/workflow-status.interface';
import { WorkflowHandleFactory } from '../workflow-handle.factory';
import { WorkflowVersionsMonitor } from '../scheduler/workflow-versions.monitor';
import type { WorkflowVersionInfo } from '../interfaces/workflow-version.interface';
import { logicalQueueName, storedQueueName, storedQueueNames } from '../utils/queue-shards';

const MAX_LIST_LIMIT = 10_000;

/**
 * Looks workflows up (by ID, by deduplication ID, by filter, counts per status, versions) and reports deduplication
 * hits.
 * Reads only. `QueueService`'s look-up methods delegate here.
 */
@Injectable()
export class WorkflowLookupService {
  constructor(
    private readonly config: DedupQueueConfig,
    private readonly store: WorkflowReadStore,
    private readonly holders: KeyHolderStore,
    private readonly events: DeduplicationEvents,
    private readonly handles: WorkflowHandleFactory,
    private readonly versions: WorkflowVersionsMonitor,
  ) {}

  /** See `QueueService.listVersions`. */
  async listVersions(): Promise<WorkflowVersionInfo[]> {
    return (await this.versions.report()).versions;
  }

  /** See `QueueService.retrieve`. */
  async retrieve<R = unknown>(workflowId: string): Promise<WorkflowHandle<R>> {
    if (!(await this.store.findRow(workflowId))) {
      throw new WorkflowNotFoundError(workflowId);
    }
    return this.handles.handle<R>(workflowId);
  }

  /** See `QueueService.findByDeduplicationId`. */
  async findByDeduplicationId<R = unknown>(
    queueName: string,
    deduplicationId: string,
  ): Promise<WorkflowHandle<R> | undefined> {
    assertQueueDeclared(this.config, queueName);
    const holder = await this.holders.findHolder(
      storedQueueName(this.config, queueName, deduplicationId),
      deduplicationId,
    );
    return holder && this.handles.handle<R>(holder.workflowId);
  }

  /** See `QueueService.list`. */
  async list(filter: ListWorkflowsOptions = {}): Promise<WorkflowStatusInfo[]> {
    const limit = filter.limit ?? 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT) {
      throw new InvalidArgumentError('filter.limit', `must be an integer from 1 to ${MAX_LIST_LIMIT}`);
    }
    const offset = filter.offset ?? 0;
    if (!Number.isSafeInteger(offset) || offset < 0) {
      throw new InvalidArgumentError('filter.offset', 'must be an integer from 0');
    }
    if (filter.parentWorkflowId !== undefined && typeof filter.parentWorkflowId !== 'string') {
      throw new InvalidArgumentError('filter.parentWorkflowId', 'must be a workflow ID (a string)');
    }
    const shards = filter.queueName === undefined ? [] : storedQueueNames(this.config, filter.queueName);
    if (shards.length <= 1) return (await this.store.list({ ...filter, limit, offset })).map(toStatusInfo);
    const lists = await Promise.all(
      shards.map((queueName) => this.store.list({ ...filter, queueName, limit: limit + offset, offset: 0 })),
    );
    return lists
      .flat()
      .sort((a, b) => b.created_at.getTime() - a.created_at.getTime() || (a.workflow_id < b.workflow_id ? 1 : -1))
      .slice(offset, offset + limit)
      .map(toStatusInfo);
  }

  /** See `QueueService.countByStatus`. */
  async countByStatus(queueName?: string): Promise<Record<string, Partial<Record<WorkflowStatus, number>>>> {
    if (queueName !== undefined) assertQueueDeclared(this.config, queueName);
    const counts: Record<string, Partial<Record<WorkflowStatus, number>>> = {};
    const shards = queueName === undefined ? [undefined] : storedQueueNames(this.config, queueName);
    for (const rows of await Promise.all(shards.map((shard) => this.store.countByStatus(shard)))) {
      for (const row of rows) {
        const byStatus = (counts[logicalQueueName(row.queueName)] ??= {});
        byStatus[row.status] = (byStatus[row.status] ?? 0) + row.count;
      }
    }
    return counts;
  }

  /** See `QueueService.onDeduplicated`. */
  onDeduplicated(listener: (event: DeduplicationEvent) => void): () => void {
    return this.events.listen(listener);
  }

  /** See `QueueService.deduplicationCounts`. */
  deduplicationCounts(): Record<string, number> {
    return this.events.countsByQueue();
  }
}
