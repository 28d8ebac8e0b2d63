import { Injectable, MessageEvent } from '@nestjs/common';
import type { Observable } from 'rxjs';
import { ChildWorkflows } from './child-workflows';
import { WorkflowEvents } from './composition/workflow-events';
import { BulkControlService } from './control/bulk-control.service';
import { ForkService } from './control/fork.service';
import type { ForkManyOptions, ForkOptions, ForkResult } from './interfaces/fork-options.interface';
import type { WorkflowVersionInfo } from './interfaces/workflow-version.interface';
import { QueueControlService } from './control/queue-control.service';
import { WorkflowControlService } from './control/workflow-control.service';
import { EnqueueService } from './enqueue/enqueue.service';
import type { AbandonedRunInfo } from './interfaces/abandoned-run.interface';
import type { BulkControlResult, WorkflowFilter } from './interfaces/bulk-control.interface';
import type { BulkEnqueueItem, BulkEnqueueOptions, BulkEnqueueResult } from './interfaces/bulk-enqueue.interface';
import type { CancelOptions } from './interfaces/cancel-options.interface';
import type { DeduplicationEvent } from './interfaces/deduplication-event.interface';
import type { EnqueueOptions } from './interfaces/enqueue-options.interface';
import type { GetEventOptions } from './interfaces/get-event-options.interface';
import type { ListWorkflowsOptions } from './interfaces/list-workflows-options.interface';
import type { QueueLimits } from './interfaces/queue-options.interface';
import type { EnqueuedWorkflowHandle, WorkflowHandle } from './interfaces/workflow-handle.interface';
import type { WorkflowFunction } from './interfaces/workflow-function.interface';
import type { WorkflowStatus, WorkflowStatusInfo } from './interfaces/workflow-status.interface';
import { WorkflowLookupService } from './lookup/workflow-lookup.service';
import { MessageSender } from './composition/message.sender';
import { StreamReaders } from './composition/stream-readers';
import type { ReadStreamOptions, StreamEventsOptions, StreamValue } from './interfaces/stream-options.interface';
import type { SendOptions } from './interfaces/message-options.interface';

type EnqueueCall = [queueName: string, workflow: WorkflowFunction | string, args: unknown[], options?: EnqueueOptions];
type WithoutQueue<T> = T extends [string, ...infer Rest] ? Rest : never;

/** Enqueues workflows and looks them up. Inject it anywhere once `DedupQueueModule.forRoot()` is imported. */
@Injectable()
export class QueueService {
  // NOTE: a facade: enqueue, look-up, workflow control and queue control each live in their own service.
  constructor(
    private readonly enqueuing: EnqueueService,
    private readonly lookup: WorkflowLookupService,
    private readonly workflows: WorkflowControlService,
    private readonly queues: QueueControlService,
    private readonly children: ChildWorkflows,
    private readonly events: WorkflowEvents,
    private readonly messages: MessageSender,
    private readonly bulk: BulkControlService,
    private readonly forks: ForkService,
    private readonly streams: StreamReaders,
  ) {}

  /**
   * Enqueues one run of a workflow. The row is written in one statement (one transaction, shared with concurrent
   * calls under load) and workers are woken on commit. Everything is validated before anything is written.
   *
   * Called inside a running workflow (outside its steps), the workflow enqueued is its child: its status names the
   * parent (`parentWorkflowId`), its ID is derived from the parent's unless `workflowId` is given, and the outcome
   * (the handle, or the `QueueDeduplicatedError`) is recorded at the parent's position, so that a re-executed parent
   * gets the same outcome and writes nothing. See docs/composing-workflows.md.
   *
   * @param queueName a queue declared in `DedupQueueModule.forRoot({ queues })`
   * @param workflow the `@Workflow()` method (`this.tasks.process`) or its registered name (`'UserTasks.process'`)
   * @param args the arguments, stored as JSON (see docs/api.md, "What round-trips through storage")
   * @param options `deduplicationId`, `onDuplicate`, `workflowId`, `timeoutMs`, `partitionKey`, `priority`, `delayMs`,
   *   `runAt`, `deduplicationWindowMs`, `manager` or `db` (see `EnqueueOptions`)
   * @throws QueueDeduplicatedError when `deduplicationId` is held by an ENQUEUED or PENDING workflow of the queue
   *   (or one still in its deduplication window) and the policy is to reject
   * @throws ChildKeyHeldByParentError inside a workflow, for a child of its own queue with its own deduplication ID
   * @throws UnknownQueueError, UnknownWorkflowError, InvalidArgumentError, WorkflowIdConflictError
   */
  enqueue<F extends WorkflowFunction>(
    queueName: string,
    workflow: F,
    args: Parameters<F>,
    options?: EnqueueOptions,
  ): Promise<EnqueuedWorkflowHandle<Awaited<ReturnType<F>>>>;
  enqueue<R = unknown>(
    queueName: string,
    workflow: string,
    args: unknown[],
    options?: EnqueueOptions,
  ): Promise<EnqueuedWorkflowHandle<R>>;
  /**
   * Enqueues one run of a workflow into its default queue, `@Workflow({ queue })`; otherwise as
   * `enqueue(queueName, workflow, args, options)`.
   * @throws InvalidArgumentError when the workflow has no default queue
   */
  enqueue<F extends WorkflowFunction>(
    workflow: F,
    args: Parameters<F>,
    options?: EnqueueOptions,
  ): Promise<EnqueuedWorkflowHandle<Awaited<ReturnType<F>>>>;
  enqueue<R = unknown>(workflow: string, args: unknown[], options?: EnqueueOptions): Promise<EnqueuedWorkflowHandle<R>>;
  async enqueue(...call: EnqueueCall | WithoutQueue<EnqueueCall>): Promise<EnqueuedWorkflowHandle<unknown>> {
    const [queueName, workflow, args, options = {}] = Array.isArray(call[1])
      ? ([this.enqueuing.defaultQueue(call[0]), ...call] as EnqueueCall)
      : (call as EnqueueCall);
    return this.children.enqueue(queueName, workflow, args, options);
  }

  /**
   * Enqueues many runs of one workflow in one statement (chunks of 1000), with the same guarantees as `enqueue`:
   * the database decides every duplicate, including duplicates within the batch (the first wins). Returns one
   * outcome per item, in order: `created`, `duplicate` (with the holder's ID) or `existing` (its `workflowId` was
   * used before). Duplicates are reported, not thrown. Everything is validated before anything is written.
   * With `options.db` (or `options.manager`) the rows are written in the caller's transaction, as for `enqueue`.
   * Inside a running workflow the items are its children and the whole call is recorded at one position, as `enqueue`.
   */
  async enqueueMany(
    queueName: string,
    workflow: WorkflowFunction | string,
    items: BulkEnqueueItem[],
    options: BulkEnqueueOptions = {},
  ): Promise<BulkEnqueueResult[]> {
    return this.children.enqueueMany(queueName, workflow, items, options);
  }

  /** A handle to the workflow that holds a deduplication ID in a queue now, or undefined when the ID is free. */
  async findByDeduplicationId<R = unknown>(
    queueName: string,
    deduplicationId: string,
  ): Promise<WorkflowHandle<R> | undefined> {
    return this.lookup.findByDeduplicationId<R>(queueName, deduplicationId);
  }

  /**
   * Calls `listener` for every deduplication hit in this process (queue, key, holder and what the policy did).
   * Returns a function that removes the listener.
   */
  onDeduplicated(listener: (event: DeduplicationEvent) => void): () => void {
    return this.lookup.onDeduplicated(listener);
  }

  /** Deduplication hits per queue in this process since it started. */
  deduplicationCounts(): Record<string, number> {
    return this.lookup.deduplicationCounts();
  }

  /** A handle to an existing workflow. @throws WorkflowNotFoundError when no workflow has this ID. */
  async retrieve<R = unknown>(workflowId: string): Promise<WorkflowHandle<R>> {
    return this.lookup.retrieve<R>(workflowId);
  }

  /**
   * Ends an ENQUEUED, DELAYED, PENDING or WAITING workflow as CANCELLED and frees its deduplication ID at once. A
   * running body's `workflowContext().signal` aborts (in whichever process runs it) and its slot is freed at once,
   * whether or not the body returns; its outcome is no longer recorded (see `abandonedRuns()`). A finished workflow
   * keeps its status. Resolves with the workflow's status afterwards.
   *
   * With `{ cancelChildren: true }` it then cancels, in this one call, every unfinished descendant: the workflows
   * this workflow's body enqueued (whatever their queue), theirs, and so on to any depth (through finished ones),
   * whatever their state: queued, delayed, running, waiting, dead-lettered. Never a workflow it only joined
   * (`return-existing`). See docs/composing-workflows.md for its cost.
   * @throws WorkflowNotFoundError when no workflow has this ID.
   */
  async cancel(workflowId: string, options?: CancelOptions): Promise<WorkflowStatus> {
    return this.children.cancel(workflowId, options);
  }

  /**
   * The last value workflow `workflowId` published under `key` with `setEvent`, from any process: resolves as soon
   * as it is set (at once if it is), or with `undefined` after `options.timeoutMs` (default 60 s; 0 reads once;
   * `Infinity`: no limit). Values set in this process are seen at once; others within half a second (polling).
   *
   * In a workflow body (outside a step) it is recorded at the body's position: what it returned (re-executed, the
   * same at once, even if the value changed since) and its deadline (a recovered workflow waits only what remained).
   * A wait of a second or more suspends the workflow, as `recv` does (WAITING: key kept, no slot), until the value
   * is set (at once, from any process) or the deadline.
   * @throws InvalidArgumentError when `workflowId` or `key` is not a non-empty string, or the timeout is not valid
   */
  async getEvent<T = unknown>(workflowId: string, key: string, options?: GetEventOptions): Promise<T | undefined> {
    return this.events.getEvent<T>(workflowId, key, options);
  }

  /**
   * Cancels every ENQUEUED, DELAYED, PENDING or WAITING workflow that matches `filter` (every field given must match; at
   * least one field), as `cancel` does each: CANCELLED, its key freed, a running body's signal aborted wherever it
   * runs. One statement per 1000 workflows, queue by queue (all declared queues without `queueName`). Returns one
   * `{ workflowId, outcome }` per unfinished workflow matched, in each queue's order: `cancelled`, or
   * `not-cancellable` for a dead letter (or one that finished meanwhile). Finished workflows are not matched.
   * @throws InvalidArgumentError for an empty or malformed filter, before anything is written
   * @throws UnknownQueueError when `queueName` is not declared
   */
  async cancelMany(filter: WorkflowFilter): Promise<BulkControlResult[]> {
    return this.bulk.cancelMany(filter);
  }

  /**
   * Resumes every CANCELLED or dead-lettered workflow that matches `filter`, as `resume` does each. One statement
   * per 1000 workflows, queue by queue. Returns one `{ workflowId, outcome }` per matched workflow: `resumed`, or
   * `key-held` when another workflow holds its deduplication ID (it stays as it was).
   * @throws InvalidArgumentError for an empty or malformed filter, before anything is written
   * @throws UnknownQueueError when `queueName` is not declared
   */
  async resumeMany(filter: WorkflowFilter): Promise<BulkControlResult[]> {
    return this.bulk.resumeMany(filter);
  }

  /**
   * Starts a new workflow from a finished (`SUCCESS`, `ERROR`, `CANCELLED`) or dead-lettered one: the source's name,
   * version (unless `options.version`), arguments, queue and deduplication ID, whose recorded positions before
   * `options.fromStep` (steps, child handles, received messages, waits, events as they were there) are copied in the
   * transaction that inserts it and replayed, not run again. By default (`'last-failure'`) every position the source
   * completed is kept, so the fork goes on from the step that failed, with a fresh retry budget. It queues like any
   * enqueue (its queue's limits apply) and takes the source's key under `options.onDuplicate`. Its status has
   * `forkedFrom`. Its ID is `<source>-fork-<position>` unless `options.workflowId` is given, so a retried call
   * returns the same fork (`created: false`). See docs/changing-workflows.md.
   * @throws WorkflowNotFoundError when no workflow has this ID
   * @throws InvalidArgumentError when the workflow has not finished, or for invalid options
   * @throws QueueDeduplicatedError when another workflow holds the source's deduplication ID (`'reject'`)
   */
  async fork<R = unknown>(workflowId: string, options?: ForkOptions): Promise<EnqueuedWorkflowHandle<R>> {
    return this.forks.fork<R>(workflowId, options);
  }

  /**
   * Forks every finished or dead-lettered workflow that matches `filter` (the filter of `cancelMany`), as `fork`
   * does each, from `options.fromStep` (default: each one's last failure). A batch of 1000 per transaction, queue by
   * queue. Returns one `{ workflowId, outcome, forkWorkflowId? }` per matched workflow: `forked`, `existing` (its
   * fork was made by an earlier call, so a retried call makes no second fork), `key-held` (another workflow holds
   * its key), or `not-forkable` (it has not finished).
   * @throws InvalidArgumentError for an empty or malformed filter, or invalid options, before anything is written
   * @throws UnknownQueueError when `queueName` is not declared
   */
  async forkMany(filter: WorkflowFilter, options?: ForkManyOptions): Promise<ForkResult[]> {
    return this.bulk.forkMany(filter, options);
  }

  /**
   * For each workflow name and version that has unfinished runs or that a live executor registers: how many runs
   * are unfinished (queued, delayed, running, waiting, dead-lettered) and how many live executors register it.
   * "Can version 1 be removed?" is `unfinished === 0`. Reads the database (every queue's unfinished runs).
   */
  async listVersions(): Promise<WorkflowVersionInfo[]> {
    return this.lookup.listVersions();
  }

  /**
   * The bodies of cancelled or timed-out workflows that still run in this process although their slots were freed
   * (they ignore their signal). Each is reported once in the log after a second, then at growing intervals.
   */
  abandonedRuns(): AbandonedRunInfo[] {
    return this.workflows.abandonedRuns();
  }

  /**
   * How many workflows each queue has per status, read from Postgres (so for every process), `DELAYED` counted
   * apart from `ENQUEUED`: `{ [queueName]: { ENQUEUED: 3, DELAYED: 1, ... } }` (statuses with none are left out).
   */
  async countByStatus(queueName?: string): Promise<Record<string, Partial<Record<WorkflowStatus, number>>>> {
    return this.lookup.countByStatus(queueName);
  }

  /**
   * Puts a CANCELLED or dead-lettered (`MAX_RECOVERY_ATTEMPTS_EXCEEDED`) workflow back in its queue, ready at once:
   * it takes its deduplication ID again, keeps its completed steps (replayed) and its priority, drops any delay
   * (reschedule it afterwards to wait), gets a fresh timeout when it starts, and its recovery count starts over;
   * its attempt number goes on counting and its used retry attempts stay used. Resuming an ENQUEUED, DELAYED or
   * PENDING workflow changes nothing (it does not jump its queue).
   * @throws QueueDeduplicatedError when another workflow holds its deduplication ID meanwhile
   * @throws InvalidArgumentError when it finished with SUCCESS or ERROR
   * @throws WorkflowNotFoundError when no workflow has this ID
   */
  async resume<R = unknown>(workflowId: string): Promise<WorkflowHandle<R>> {
    return this.workflows.resume<R>(workflowId);
  }

  /**
   * Changes when an ENQUEUED workflow may start (`delayMs` from now, or `runAt`) and/or its `priority`.
   * @throws InvalidArgumentError when the workflow is no longer ENQUEUED, or the change is invalid
   * @throws WorkflowNotFoundError when no workflow has this ID
   */
  async reschedule(workflowId: string, change: Pick<EnqueueOptions, 'delayMs' | 'runAt' | 'priority'>): Promise<void> {
    return this.workflows.reschedule(workflowId, change);
  }

  /** Stops every process from starting workflows of this queue (enqueues still succeed) until `resumeQueue`. */
  async pauseQueue(queueName: string): Promise<void> {
    return this.queues.pauseQueue(queueName);
  }

  async resumeQueue(queueName: string): Promise<void> {
    return this.queues.resumeQueue(queueName);
  }

  /**
   * Changes a queue's limits at run time, for every process sharing the database (within a second; at once where
   * notifications arrive). A limit given as `null` goes back to its declared value; limits left out stay as they are.
   */
  async setQueueLimits(queueName: string, limits: { [K in keyof QueueLimits]?: QueueLimits[K] | null }): Promise<void> {
    return this.queues.setQueueLimits(queueName, limits);
  }

  /** The limits that apply to a queue now (declared, with run-time changes), and whether it is paused. */
  async getQueueSettings(queueName: string): Promise<QueueLimits & { paused: boolean }> {
    return this.queues.getQueueSettings(queueName);
  }

  /**
   * Sends a JSON message to a workflow, which receives it with `recv(topic)` (each message once, oldest first per
   * topic); a workflow waiting in `recv` on that topic wakes up. A workflow that exists in any status accepts
   * messages; those it never receives stay with it until retention removes them with it.
   *
   * @param workflowId the receiving workflow
   * @param message any JSON value (see docs/api.md, "What round-trips through storage")
   * In a workflow body (outside a step) the send is recorded at the body's position, in the transaction that stores
   * the message: re-executed, the body sends nothing again, with or without `idempotencyKey` (and a refusal is thrown
   * again). Inside a step it is at least once, as the step: give an `idempotencyKey`.
   *
   * @param options `topic` (default: the default topic), `idempotencyKey` (the same key twice delivers once)
   * @throws WorkflowNotFoundError when no workflow has this ID
   * @throws InvalidArgumentError for a message JSON cannot hold, an empty topic or idempotency key
   */
  async send(workflowId: string, message: unknown, options?: SendOptions): Promise<void> {
    return this.messages.send(workflowId, message, options);
  }

  /**
   * Lists workflows, newest first by creation time (ties: the later enqueued first). Reads the history in windows of
   * creation time until it has `offset + limit` rows; a filter that few finished workflows match reads it all.
   */
  async list(filter: ListWorkflowsOptions = {}): Promise<WorkflowStatusInfo[]> {
    return this.lookup.list(filter);
  }

  /**
   * Reads the stream `key` of a workflow (the values its `writeStream(key, value)` appended), from any process: an
   * async iterable that yields `{ offset, value }` in order from `options.offset` (default 0), including the values
   * written later, pushed as they are written (the module's LISTEN connection carries a hint, and the value is read
   * from the table), and ends when the stream is closed (`closeStream`, or the workflow finished, whatever its
   * outcome). Reading a finished workflow's stream yields it whole and ends. Break out of the loop to stop reading.
   *
   * @throws InvalidArgumentError (at once) for an empty workflow ID, a key that is not a non-empty string of at most
   *   255 characters, or an offset that is not an integer, 0 or more
   * @throws WorkflowNotFoundError (from the first iteration) when no workflow has this ID
   */
  readStream<T = unknown>(workflowId: string, key: string, options?: ReadStreamOptions): AsyncIterable<StreamValue<T>> {
    return this.streams.readStream<T>(workflowId, key, options);
  }

  /**
   * The stream `key` of a workflow as server-sent events, for an `@Sse()` route: each value is a `MessageEvent` whose
   * `id` is its offset and whose `data` is the value (JSON on the wire). Pass the request's `Last-Event-ID` header as
   * `lastEventId`: a browser's `EventSource` that reconnects (a dropped connection, a server restart) resumes after
   * the last event it received, missing and repeating nothing. When the stream ends, a last event of type `end`
   * (`data: { offset }`, the stream's length) is sent and the observable completes: close the `EventSource` on it,
   * or it reconnects. While the application shuts down, the observable completes without `end` (the browser
   * reconnects, to another instance or the restarted one).
   *
   * @throws InvalidArgumentError (at once) for an empty workflow ID, an invalid key, or a `lastEventId` that is not
   *   an integer, -1 or more
   */
  streamEvents(workflowId: string, key: string, options?: StreamEventsOptions): Observable<MessageEvent> {
    return this.streams.streamEvents(workflowId, key, options);
  }
}
