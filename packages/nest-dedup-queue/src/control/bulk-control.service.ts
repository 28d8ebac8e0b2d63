import { Injectable } from '@nestjs/common';
import { DedupQueueConfig, assertQueueDeclared } from '../dedup-queue.config';
import {
  BulkBatch,
  BulkControlStore,
  BulkFilter,
  filterParams,
  matchesSql,
} from '../database/workflows/control/bulk-control.store';
import { ChildWorkflowStore } from '../database/workflows/control/child-workflow.store';
import { ForkStore } from '../database/workflows/control/fork.store';
import type { ForkManyOptions, ForkResult } from '../interfaces/fork-options.interface';
import { ForkService, validForkManyOptions } from './fork.service';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import type { BulkControlResult, WorkflowFilter } from '../interfaces/bulk-control.interface';
import { WORKFLOW_STATUSES } from '../interfaces/workflow-status.interface';
import { QueueScheduler } from '../scheduler/queue.scheduler';
import { unknownKey } from '../utils/known-keys';
import { WorkflowCompletions } from '../workflow-completions';
import { WorkflowLifecycle } from '../observability/workflow-lifecycle.events';
import { everyStoredQueueName, logicalQueueName, storedQueueNames } from '../utils/queue-shards';

/** Workflows per statement of a bulk call. */
const BATCH = 1000;
const FILTER_KEYS: readonly (keyof WorkflowFilter)[] = ['queueName', 'status', 'workflowIds', 'deduplicationIds'];

/**
 * Cancels, resumes and forks every workflow a filter matches, a batch of 1000 per statement, queue by queue (every
 * statement names its queue). Each workflow it cancels is told as `cancel` tells it (the process running it aborts
 * it, a `cancelled` lifecycle event). `QueueService.cancelMany`, `resumeMany` and `forkMany` delegate here.
 */
@Injectable()
export class BulkControlService {
  constructor(
    private readonly config: DedupQueueConfig,
    private readonly store: BulkControlStore,
    private readonly scheduler: QueueScheduler,
    private readonly completions: WorkflowCompletions,
    private readonly lifecycle: WorkflowLifecycle,
    private readonly children: ChildWorkflowStore,
    private readonly forks: ForkStore,
    private readonly fork: ForkService,
  ) {}

  /** See `QueueService.cancelMany`. */
  async cancelMany(filter: WorkflowFilter): Promise<BulkControlResult[]> {
    const results = await this.forEachBatch(filter, (queue, valid, after) =>
      this.store.cancelBatch(queue, valid, after, BATCH),
    );
    this.tell(results);
    return results.map(({ workflowId, outcome }) => ({ workflowId, outcome }));
  }

  /**
   * Tells what a cancelled workflow's cancel tells (the process running it aborts it, waiting handles learn it
   * finished, a `cancelled` lifecycle event); returns how many were cancelled.
   */
  private tell(results: Array<BulkBatch['results'][number] & { queueName: string }>): number {
    let cancelled = 0;
    for (const { workflowId, outcome, queueName, workflowName } of results) {
      if (outcome !== 'cancelled' || workflowName === undefined) continue;
      cancelled += 1;
      this.scheduler.cancelled({ workflowId, reason: 'cancelled' });
      this.completions.finished(workflowId);
      this.lifecycle.emit({ event: 'cancelled', workflowId, queueName, workflowName, reason: 'cancelled' });
    }
    return cancelled;
  }

  /**
   * Cancels every unfinished descendant of `rootWorkflowId` (see `QueueService.cancel` with `cancelChildren`), level
   * by level: the children of the level's workflows, read per declared queue (1,000 parents per read), those still
   * unfinished or dead-lettered cancelled (1,000 per statement) before the next level is read, so that a workflow's
   * children are read once it can no longer enqueue any (a child enqueue is fenced by its parent's row: see
   * `ChildWorkflows`). Finished children are walked through, for their own children. Returns how many it cancelled.
   */
  async cancelDescendants(rootWorkflowId: string): Promise<number> {
    const queues = (await this.children.queueNames()).flatMap((name) => storedQueueNames(this.config, name));
    const seen = new Set([rootWorkflowId]);
    let cancelled = 0;
    for (let level = [rootWorkflowId]; level.length > 0;) {
      const next: string[] = [];
      for (const queueName of queues) {
        for (let start = 0; start < level.length; start += BATCH) {
          const found = await this.children.children(queueName, level.slice(start, start + BATCH));
          const fresh = found.filter((child) => !seen.has(child.workflowId));
          for (const child of fresh) seen.add(child.workflowId);
          next.push(...fresh.map((child) => child.workflowId));
          const cancellable = fresh.filter((child) => child.cancellable).map((child) => child.workflowId);
          cancelled += await this.cancelIn(queueName, cancellable);
        }
      }
      level = next;
    }
    return cancelled;
  }

  /** Cancels the given unfinished or dead-lettered workflows of a queue, told as `cancelMany` tells them. */
  private async cancelIn(queueName: string, workflowIds: string[]): Promise<number> {
    let cancelled = 0;
    for (let start = 0; start < workflowIds.length; start += BATCH) {
      const filter = { workflowIds: workflowIds.slice(start, start + BATCH), deduplicationIds: null, statuses: null };
      const { results } = await this.store.cancelBatch(queueName, filter, '0', BATCH, true);
      cancelled += this.tell(results.map((result) => ({ ...result, queueName })));
    }
    return cancelled;
  }

  /** See `QueueService.resumeMany`. */
  async resumeMany(filter: WorkflowFilter): Promise<BulkControlResult[]> {
    const results = await this.forEachBatch(filter, (queue, valid, after) =>
      this.store.resumeBatch(queue, valid, after, BATCH),
    );
    return results.map(({ workflowId, outcome }) => ({ workflowId, outcome }));
  }

  /** See `QueueService.forkMany`. */
  async forkMany(filter: WorkflowFilter, options: ForkManyOptions = {}): Promise<ForkResult[]> {
    validForkManyOptions(options ?? {});
    const results = await this.forEachBatch(filter, async (queue, valid, after) => {
      const sources = await this.forks.matching(matchesSql('w.'), filterParams(queue, valid, after), BATCH);
      return {
        results: await this.fork.forkBatch(queue, sources, options ?? {}),
        lastSeq: sources[sources.length - 1]?.seq,
      };
    });
    return results.map(({ workflowId, outcome, forkWorkflowId }) => ({
      workflowId,
      outcome,
      ...(forkWorkflowId === undefined ? {} : { forkWorkflowId }),
    }));
  }

  private async forEachBatch<R>(
    filter: WorkflowFilter,
    batch: (queueName: string, filter: BulkFilter, afterSeq: string) => Promise<{ results: R[]; lastSeq?: string }>,
  ): Promise<Array<R & { queueName: string }>> {
    const valid = validFilter(filter);
    if (filter.queueName !== undefined) assertQueueDeclared(this.config, filter.queueName);
    const queues =
      filter.queueName === undefined
        ? everyStoredQueueName(this.config)
        : storedQueueNames(this.config, filter.queueName);
    const results: Array<R & { queueName: string }> = [];
    for (const queueName of queues) {
      for (let after = '0'; ;) {
        const done = await batch(queueName, valid, after);
        results.push(...done.results.map((result) => ({ ...result, queueName: logicalQueueName(queueName) })));
        if (done.results.length < BATCH || done.lastSeq === undefined) break;
        after = done.lastSeq;
      }
    }
    return results;
  }
}

function validFilter(filter: WorkflowFilter): BulkFilter {
  if (filter === null || typeof filter !== 'object' || Array.isArray(filter)) {
    throw new InvalidArgumentError('filter', 'must be an object');
  }
  const unknown = unknownKey(filter, FILTER_KEYS);
  if (unknown) throw new InvalidArgumentError(`filter.${unknown.key}`, unknown.reason);
  if (FILTER_KEYS.every((key) => filter[key] === undefined)) {
    throw new InvalidArgumentError(
      'filter',
      'needs at least one of queueName, status, workflowIds, deduplicationIds (an empty filter would match every workflow)',
    );
  }
  if (filter.queueName !== undefined && typeof filter.queueName !== 'string') {
    throw new InvalidArgumentError('filter.queueName', 'must be a string');
  }
  const statuses = filter.status === undefined ? null : Array.isArray(filter.status) ? filter.status : [filter.status];
  for (const status of statuses ?? []) {
    if (!WORKFLOW_STATUSES.includes(status)) {
      throw new InvalidArgumentError('filter.status', `must be workflow statuses, got ${JSON.stringify(status)}`);
    }
  }
  return {
    statuses: statuses,
    workflowIds: stringList(filter.workflowIds, 'filter.workflowIds'),
    deduplicationIds: stringList(filter.deduplicationIds, 'filter.deduplicationIds'),
  };
}

function stringList(value: unknown, field: string): string[] | null {
  if (value === undefined) return null;
  if (!Array.isArray(value) || value.some((item) => typeof item !== 'string')) {
    throw new InvalidArgumentError(field, 'must be an array of strings');
  }
  return value as string[];
}
