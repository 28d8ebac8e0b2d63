import { DedupQueueError } from '../errors/dedup-queue.error';
import {
  type ExecutionFrame,
  type ForwardedCallTarget,
  type FramedExecution,
  executionFrames,
} from '../execution/execution-frames';
import { reviveError, toErrorInfo } from '../utils/error-info';
import { type EncodedRemote, decodeFromMain, encodeForMain } from '../isolation/crossing';
import type { CallOutcome, FromThread, RunContextData, ToThread } from '../isolation/thread-messages';

type Callback = (...args: unknown[]) => unknown;

/**
 * One run of an isolated body, seen from its worker thread: the execution frame the body runs in, whose
 * inside-workflow calls (`runStep`, `sleep`, `QueueService`'s methods, ...) are forwarded to the main thread and
 * answered from there; the functions those calls pass (a step's body) are called back here when the main thread
 * asks. Its signal aborts when the main thread's does.
 */
export class ThreadRun {
  readonly frame: ExecutionFrame;
  private readonly controller = new AbortController();
  private readonly pending = new Map<number, { resolve(value: unknown): void; reject(reason: unknown): void }>();
  private readonly callbacks = new Map<number, Callback>();
  /** The callbacks each call in flight passed: they may be called until its answer arrives. */
  private readonly callbacksOfCall = new Map<number, number[]>();
  private lastId = 0;
  private ended = false;

  constructor(
    readonly runId: number,
    context: RunContextData,
    private readonly post: (message: FromThread) => void,
  ) {
    const notInThread = (what: string) => new DedupQueueError(`internal: ${what} is not available in a worker thread`);
    const execution: FramedExecution = {
      context: { ...context, signal: this.controller.signal },
      get database(): never {
        throw notInThread('the database');
      },
      get nextStep(): never {
        throw notInThread('the next step position');
      },
      get deadlineAt(): never {
        throw notInThread("the run's deadline");
      },
      get storedQueueName(): never {
        throw notInThread("the run's stored queue name");
      },
      runStep: (name, fn, options) => this.send({ function: 'runStep' }, [name, fn, options]) as Promise<never>,
      runRecorded: () => {
        throw notInThread('a recorded operation');
      },
      patch: (patchId) => this.send({ function: 'patched' }, [patchId]) as Promise<boolean>,
      deprecatePatch: () => {
        throw notInThread('deprecatePatch() on the execution');
      },
    };
    this.frame = { execution, inStep: false, forward: (target, args) => this.call(target, args) };
  }

  /**
   * Forwards a call to the main thread; resolves or rejects as it did there. What it returns can also be iterated
   * with `for await` when the call returns an async iterable (`readStream`), as it can be on the main thread.
   */
  call(target: ForwardedCallTarget, args: unknown[]): Promise<unknown> & AsyncIterable<unknown> {
    const result = this.send(target, args);
    return Object.assign(result, {
      [Symbol.asyncIterator]: () =>
        lazyIterator(async () => ((await result) as AsyncIterable<unknown>)[Symbol.asyncIterator]()),
    });
  }

  private send(target: ForwardedCallTarget, args: unknown[]): Promise<unknown> {
    // NOTE: the run is over for its worker (suspended): the body waits forever, as a suspended body does in process.
    if (this.ended) return new Promise(() => undefined);
    const callId = ++this.lastId;
    const callbacks: number[] = [];
    const encoded = encodeForMain(args, (fn) => {
      const id = ++this.lastId;
      this.callbacks.set(id, fn);
      callbacks.push(id);
      return id;
    }) as unknown[];
    const inStep = executionFrames.getStore()?.inStep ?? false;
    return new Promise((resolve, reject) => {
      try {
        this.post({ kind: 'call', runId: this.runId, callId, target, args: encoded, inStep });
      } catch (error) {
        for (const id of callbacks) this.callbacks.delete(id);
        throw new DedupQueueError(
          `An argument cannot cross from the worker thread to the main thread: ${(error as Error).message}`,
        );
      }
      this.pending.set(callId, { resolve, reject });
      this.callbacksOfCall.set(callId, callbacks);
    });
  }

  reply({ callId, outcome }: Extract<ToThread, { kind: 'reply' }>): void {
    const call = this.pending.get(callId);
    this.pending.delete(callId);
    for (const id of this.callbacksOfCall.get(callId) ?? []) this.callbacks.delete(id);
    this.callbacksOfCall.delete(callId);
    if (!call) return;
    if ('error' in outcome) call.reject(reviveError(outcome.error));
    else call.resolve(decodeFromMain(outcome.value, (remote) => this.stub(remote)));
  }

  /** Calls a function a forwarded call passed, in this run's frame (inside a step when the main thread's caller is). */
  async invoke({ invocationId, callbackId, args, inStep }: Extract<ToThread, { kind: 'invoke' }>): Promise<void> {
    let outcome: CallOutcome;
    try {
      const callback = this.callbacks.get(callbackId);
      if (!callback) throw new DedupQueueError('internal: the function to call back is gone');
      const decoded = decodeFromMain(args, (remote) => this.stub(remote)) as unknown[];
      const value = await executionFrames.run({ ...this.frame, inStep }, () => callback(...decoded));
      outcome = { value: encodeForMain(value, () => 0) };
    } catch (error) {
      outcome = { error: toErrorInfo(error) };
    }
    const message = { kind: 'invoked', runId: this.runId, invocationId, outcome } as const;
    try {
      this.post(message);
    } catch (error) {
      this.post({ ...message, outcome: { error: toErrorInfo(error) } });
    }
  }

  abort(reason: Extract<ToThread, { kind: 'abort' }>['reason']): void {
    this.controller.abort(reviveError(reason));
  }

  /** The main thread is done with this run: what the body still awaits from it never comes. */
  end(): void {
    this.ended = true;
    this.pending.clear();
    this.callbacks.clear();
    this.callbacksOfCall.clear();
  }

  /** What the thread holds of an object that stays in the main thread: its data, and its methods as calls. */
  private stub(remote: EncodedRemote): unknown {
    const target = (method: string | null): ForwardedCallTarget => ({ object: remote.id, method });
    if (remote.callable) return (...args: unknown[]) => this.call(target(null), args);
    const stub = { ...(decodeFromMain(remote.data, (nested) => this.stub(nested)) as object) } as Record<
      string | symbol,
      unknown
    >;
    for (const method of remote.methods) stub[method] = (...args: unknown[]) => this.call(target(method), args);
    if (remote.asyncIterable) {
      stub[Symbol.asyncIterator] = () =>
        lazyIterator(() => this.send(target('@@asyncIterator'), []) as Promise<AsyncIterator<unknown>>);
    }
    return stub;
  }
}

/** An async iterator that steps through the iterator `source` resolves with, asked for at the first step. */
function lazyIterator(source: () => Promise<AsyncIterator<unknown>>): AsyncIterator<unknown> {
  let iterator: Promise<AsyncIterator<unknown>> | undefined;
  const resolved = () => (iterator ??= source());
  return {
    next: async (...args: [] | [unknown]) => (await resolved()).next(...args),
    return: async (value?: unknown) => {
      const it = await resolved();
      return it.return ? it.return(value) : { done: true, value };
    },
  };
}
