import type { IsolatedTarget } from '../discovery/workflow.registry';
import { DedupQueueError } from '../errors/dedup-queue.error';
import { WorkflowInterruptedError } from '../errors/workflow-interrupted.error';
import { WorkflowThreadError } from '../errors/workflow-thread.error';
import { type ForwardedCallTarget, executionFrames } from '../execution/execution-frames';
import { insideWorkflowFunctionNamed } from '../execution/inside-workflow-function';
import type { WorkflowExecution } from '../execution/workflow-execution';
import { reviveError, toErrorInfo } from '../utils/error-info';
import { ModuleLogger } from '../utils/module-logger';
import { fromStoredJson } from '../utils/stored-json';
import { decodeFromThread, encodeForThread } from './crossing';
import type { CallOutcome, FromThread } from './thread-messages';
import type { PoolThread, ThreadPool, ThreadUser } from './thread-pool';

/**
 * How long an isolated body whose signal aborted may take to settle (to clean up after a cancel) before its thread
 * is terminated. Its slot is free meanwhile, and nothing it does is recorded (its run is interrupted).
 */
export const STOP_GRACE_MS = 500;

/** The services whose methods an isolated body may call (through the stubs its thread provides), by class name. */
export type ThreadServices = ReadonlyMap<string, object>;

/**
 * One run of an isolated body, seen from the main thread: it borrows a thread from the pool, starts the body there,
 * and serves the calls the body forwards (inside-workflow functions, service methods, methods of objects earlier
 * calls returned) by running them here, in the run's own execution frame, where the run's positions are taken and
 * its records fenced as for any other body. When the run's signal aborts, the thread's signal aborts too, and a
 * body still running `STOP_GRACE_MS` later is stopped: its thread is terminated and the run ends with the signal's
 * reason. From then on, nothing the thread sends is heard.
 */
export class IsolatedRun implements ThreadUser {
  private readonly logger = new ModuleLogger('DedupQueueScheduler');
  private thread?: PoolThread;
  /** The run's number in its thread (how many times the thread was lent): what tells its messages from earlier runs'. */
  private runId = 0;
  private over = false;
  private settle?: { resolve(value: unknown): void; reject(reason: unknown): void };
  private stopTimer?: NodeJS.Timeout;
  /** The objects calls returned that the thread holds stubs of (handles, iterators), by number. */
  private readonly objects = new Map<number, object>();
  /** The calls of the body's callbacks (steps' bodies) in flight in the thread. */
  private readonly invocations = new Map<number, { resolve(value: unknown): void; reject(reason: unknown): void }>();
  private lastId = 0;

  constructor(
    private readonly target: IsolatedTarget,
    private readonly execution: WorkflowExecution,
    private readonly inputsJson: string,
    private readonly pool: ThreadPool,
    private readonly services: ThreadServices,
  ) {}

  private get signal(): AbortSignal {
    return this.execution.context.signal;
  }

  /** Runs the body: resolves with what it returned (read back from its JSON), rejects with what it threw. */
  async run(): Promise<unknown> {
    const thread = await this.pool.acquire(this, this.signal);
    [this.thread, this.runId] = [thread, thread.runs];
    return new Promise((resolve, reject) => {
      this.settle = { resolve, reject };
      const { workflowId, workflowName, version, queueName, attempt } = this.execution.context;
      const context = { workflowId, workflowName, version, queueName, attempt };
      thread.post({ kind: 'run', runId: this.runId, target: this.target, context, inputsJson: this.inputsJson });
      if (this.signal.aborted) this.aborted();
      else this.signal.addEventListener('abort', this.aborted, { once: true });
    });
  }

  /** The run is over for its worker while the body waits (suspended in a durable wait): the thread forgets it. */
  end(): void {
    if (this.over || !this.thread) return;
    this.thread.post({ kind: 'end', runId: this.runId });
    this.finish();
    this.pool.release(this.thread);
  }

  message(message: FromThread): void {
    if (this.over || !('runId' in message) || message.runId !== this.runId) return;
    switch (message.kind) {
      case 'call':
        return void this.serve(message);
      case 'invoked':
        return this.invoked(message.invocationId, message.outcome);
      case 'done':
        return this.returned(() => this.settle?.resolve(fromStoredJson(message.outputJson)));
      case 'failed':
        return this.returned(() => this.settle?.reject(reviveError(message.error)));
    }
  }

  ended(error: Error | undefined, exitCode: number): void {
    if (this.over) return;
    this.finish();
    if (this.signal.aborted) return this.settle?.reject(this.signal.reason as Error);
    const { workflowId } = this.execution.context;
    const code = (error as { code?: string } | undefined)?.code;
    this.settle?.reject(
      code === 'ERR_WORKER_OUT_OF_MEMORY'
        ? new WorkflowThreadError(workflowId, 'resource-limits', `went past its resourceLimits: ${error!.message}`)
        : error
          ? new WorkflowThreadError(
              workflowId,
              'crashed',
              `ended with an error that escaped the body: ${error.message}`,
            )
          : new WorkflowThreadError(workflowId, 'exited', `exited (code ${exitCode}) before the body returned`),
    );
  }

  private returned(settle: () => void): void {
    this.finish();
    this.pool.release(this.thread!);
    settle();
  }

  private readonly aborted = (): void => {
    if (this.over) return;
    this.thread?.post({ kind: 'abort', runId: this.runId, reason: toErrorInfo(this.signal.reason) });
    this.stopTimer = setTimeout(() => this.stop(), STOP_GRACE_MS);
    this.stopTimer.unref();
  };

  /** The body ignored its signal: its thread is terminated, and the run ends with the signal's reason. */
  private stop(): void {
    if (this.over) return;
    this.finish();
    this.pool.discard(this.thread!);
    const { workflowName, workflowId } = this.execution.context;
    const why = this.signal.reason instanceof WorkflowInterruptedError ? ` (${this.signal.reason.reason})` : '';
    this.logger.warn(
      `The isolated body of workflow ${workflowName} (${workflowId}) ignored its signal${why}; its worker thread ` +
        `was terminated`,
    );
    this.settle?.reject(this.signal.reason as Error);
  }

  private finish(): void {
    this.over = true;
    clearTimeout(this.stopTimer);
    this.signal.removeEventListener('abort', this.aborted);
    if (this.invocations.size > 0) {
      const reason = this.signal.aborted ? (this.signal.reason as Error) : new DedupQueueError('The run is over');
      for (const invocation of this.invocations.values()) invocation.reject(reason);
      this.invocations.clear();
    }
    this.objects.clear();
  }

  /** Runs a call the body forwarded, in the run's frame, and answers with its outcome. */
  private async serve({ callId, target, args, inStep }: Extract<FromThread, { kind: 'call' }>): Promise<void> {
    let outcome: CallOutcome;
    try {
      // NOTE: called before the first await, so calls take the run's positions in the order the body made them.
      const [receiver, fn] = this.resolve(target);
      const decoded = decodeFromThread(args, (id) => this.callback(id)) as unknown[];
      const frame = { execution: this.execution, inStep, isolated: true };
      const value = await executionFrames.run(frame, () => fn.apply(receiver, decoded));
      outcome = { value: encodeForThread(value, (object) => this.keep(object)) };
    } catch (error) {
      outcome = { error: toErrorInfo(error) };
    }
    this.reply(callId, outcome);
  }

  private reply(callId: number, outcome: CallOutcome): void {
    if (this.over) return;
    try {
      this.thread!.post({ kind: 'reply', runId: this.runId, callId, outcome });
    } catch (error) {
      this.thread!.post({ kind: 'reply', runId: this.runId, callId, outcome: { error: toErrorInfo(error) } });
    }
  }

  /** The function a forwarded call names, with what it is called on. */
  private resolve(target: ForwardedCallTarget): [unknown, (...args: unknown[]) => unknown] {
    const notAvailable = (what: string) =>
      new DedupQueueError(`${what} is not available to an isolated body (@Workflow({ isolate: 'thread' }))`);
    if ('function' in target) {
      const fn = insideWorkflowFunctionNamed(target.function);
      if (!fn) throw notAvailable(`${target.function}()`);
      return [undefined, fn as (...args: unknown[]) => unknown];
    }
    const receiver = 'service' in target ? this.services.get(target.service) : this.objects.get(target.object);
    if (receiver === undefined) throw notAvailable('service' in target ? target.service : 'This object');
    if (target.method === null) return [undefined, receiver as (...args: unknown[]) => unknown];
    if (target.method === '@@asyncIterator') {
      const iterable = receiver as AsyncIterable<unknown>;
      return [iterable, iterable[Symbol.asyncIterator] as (...args: unknown[]) => unknown];
    }
    const fn = (receiver as Record<string, unknown>)[target.method];
    if (typeof fn !== 'function' || target.method === 'constructor') throw notAvailable(target.method);
    return [receiver, fn as (...args: unknown[]) => unknown];
  }

  private keep(object: object): number {
    const id = ++this.lastId;
    this.objects.set(id, object);
    return id;
  }

  /** A function that calls the body's function `callbackId` in the thread. */
  private callback(callbackId: number): (...args: unknown[]) => Promise<unknown> {
    return (...args) => this.invoke(callbackId, args);
  }

  /** Calls a function the body passed (a step's body) in the thread, in the frame the caller here runs in. */
  private invoke(callbackId: number, args: unknown[]): Promise<unknown> {
    if (this.over) {
      return Promise.reject(
        this.signal.aborted ? (this.signal.reason as Error) : new DedupQueueError('The run is over'),
      );
    }
    const invocationId = ++this.lastId;
    const inStep = executionFrames.getStore()?.inStep ?? false;
    return new Promise((resolve, reject) => {
      this.invocations.set(invocationId, { resolve, reject });
      const encoded = encodeForThread(args, (object) => this.keep(object)) as unknown[];
      this.thread!.post({ kind: 'invoke', runId: this.runId, invocationId, callbackId, args: encoded, inStep });
    });
  }

  private invoked(invocationId: number, outcome: CallOutcome): void {
    const invocation = this.invocations.get(invocationId);
    this.invocations.delete(invocationId);
    if (!invocation) return;
    if ('error' in outcome) invocation.reject(reviveError(outcome.error));
    else invocation.resolve(decodeFromThread(outcome.value, (id) => this.callback(id)));
  }
}
