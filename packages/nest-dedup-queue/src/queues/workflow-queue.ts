import type { BulkEnqueueItem, BulkEnqueueOptions, BulkEnqueueResult } from '../interfaces/bulk-enqueue.interface';
import type { EnqueueOptions } from '../interfaces/enqueue-options.interface';
import type { EnqueuedWorkflowHandle, WorkflowHandle } from '../interfaces/workflow-handle.interface';
import type { WorkflowFunction } from '../interfaces/workflow-function.interface';
import type { QueueService } from '../queue.service';

/**
 * One queue, injected with `@InjectQueue(name)` where `DedupQueueModule.registerQueue({ name })` declared it. Its
 * methods are `QueueService`'s with the queue fixed: the same validation, deduplication, types and errors.
 */
export class WorkflowQueue {
  constructor(
    /** The queue's name. */
    readonly name: string,
    private readonly queues: QueueService,
  ) {}

  /**
   * Enqueues one run of a workflow into this queue; see `QueueService.enqueue`.
   *
   * @param workflow the `@Workflow()` method (`this.tasks.process`) or its registered name (`'UserTasks.process'`,
   *   or a name listed in `forRoot({ externalWorkflows })`)
   * @param args the arguments, stored as JSON
   * @param options `deduplicationId`, `workflowId`, `onDuplicate`, `timeoutMs`, ... (see `EnqueueOptions`)
   * @throws QueueDeduplicatedError when `deduplicationId` is held in this queue and the policy is to reject
   * @throws UnknownWorkflowError, InvalidArgumentError, WorkflowIdConflictError, DatabaseUnavailableError
   */
  enqueue<F extends WorkflowFunction>(
    workflow: F,
    args: Parameters<F>,
    options?: EnqueueOptions,
  ): Promise<EnqueuedWorkflowHandle<Awaited<ReturnType<F>>>>;
  enqueue<R = unknown>(workflow: string, args: unknown[], options?: EnqueueOptions): Promise<EnqueuedWorkflowHandle<R>>;
  enqueue(
    workflow: WorkflowFunction | string,
    args: unknown[],
    options?: EnqueueOptions,
  ): Promise<EnqueuedWorkflowHandle<unknown>> {
    return this.queues.enqueue(this.name, workflow as string, args, options);
  }

  /**
   * Enqueues many runs of one workflow into this queue in one statement per 1000; one outcome per item, in order
   * (`created`, `duplicate` or `existing`); duplicates are reported, not thrown. See `QueueService.enqueueMany`.
   */
  enqueueMany(
    workflow: WorkflowFunction | string,
    items: BulkEnqueueItem[],
    options?: BulkEnqueueOptions,
  ): Promise<BulkEnqueueResult[]> {
    return this.queues.enqueueMany(this.name, workflow, items, options);
  }

  /** A handle to the workflow that holds a deduplication ID in this queue now, or undefined when the ID is free. */
  findByDeduplicationId<R = unknown>(deduplicationId: string): Promise<WorkflowHandle<R> | undefined> {
    return this.queues.findByDeduplicationId<R>(this.name, deduplicationId);
  }
}
