import { Injectable, Logger, OnApplicationShutdown } from '@nestjs/common';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { DedupQueueConfig } from '../dedup-queue.config';
import { ModuleLogger } from '../utils/module-logger';
import { DedupQueueError } from '../errors/dedup-queue.error';
import type { FromThread, ThreadData, ToThread } from './thread-messages';

/** The script each worker thread runs (compiled next to this file). */
const THREAD_ENTRY = join(__dirname, '..', 'worker-thread', 'thread-main.js');
/** How long a thread asked to close (idle, recycled) may take to close its providers before it is terminated. */
const CLOSE_TIMEOUT_MS = 5000;

/** Where a thread's messages go while it is lent: a run of an isolated body, or the check at boot. */
export interface ThreadUser {
  message(message: FromThread): void;
  /** The thread ended while lent: `error` is what ended it (an error that escaped, the memory cap), if anything did. */
  ended(error: Error | undefined, exitCode: number): void;
}

/** One worker thread of the pool. */
export class PoolThread {
  /** How many times it was lent. */
  runs = 0;
  user?: ThreadUser;
  idleTimer?: NodeJS.Timeout;
  /** What ended it, once an error did (the `exit` event follows). */
  error?: Error;
  exited = false;

  constructor(readonly worker: Worker) {}

  post(message: ToThread): void {
    if (!this.exited) this.worker.postMessage(message);
  }
}

interface Waiter {
  user: ThreadUser;
  resolve: (thread: PoolThread) => void;
  reject: (reason: Error) => void;
  signal?: AbortSignal;
  onAbort: () => void;
}

/**
 * The worker threads that run isolated bodies in this process (`forRoot({ isolation })`): at most `threads` at
 * once, each lent to one run at a time. A thread starts when a run needs one and none is idle; it goes back to the
 * pool when the run is over, and ends after `maxRunsPerThread` runs, after `idleTimeoutMs` idle (its providers
 * closed first) or when its body had to be stopped (terminated at once). At shutdown every thread ends. Log lines
 * the threads write through Nest's `Logger` arrive here and go to the application's logger.
 */
@Injectable()
export class ThreadPool implements OnApplicationShutdown {
  private readonly logger = new ModuleLogger('DedupQueueScheduler');
  /** Idle or lent; not those closing. */
  private readonly threads = new Set<PoolThread>();
  private readonly idle: PoolThread[] = [];
  private readonly waiting: Waiter[] = [];
  private readonly closing = new Set<Promise<void>>();
  private closed = false;

  constructor(private readonly config: DedupQueueConfig) {}

  /**
   * Lends a thread to `user`: an idle one, a new one while fewer than `threads` run, or the next one released.
   * Rejects with `signal`'s reason when it aborts first, and once the application is shutting down.
   */
  acquire(user: ThreadUser, signal?: AbortSignal): Promise<PoolThread> {
    if (this.closed) return Promise.reject(new DedupQueueError('The worker threads are closed: shutting down'));
    if (signal?.aborted) return Promise.reject(signal.reason as Error);
    const free = this.takeFree();
    if (free) return Promise.resolve(this.lend(free, user));
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        user,
        resolve,
        reject,
        signal,
        onAbort: () => {
          this.waiting.splice(this.waiting.indexOf(waiter), 1);
          reject(signal?.reason as Error);
        },
      };
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      this.waiting.push(waiter);
    });
  }

  /** The user is done with a thread that is fine: it goes to the next waiting user, idles, or is recycled. */
  release(thread: PoolThread): void {
    thread.user = undefined;
    if (thread.exited) return;
    const { maxRunsPerThread } = this.config.isolation;
    if (this.closed || (maxRunsPerThread !== undefined && thread.runs >= maxRunsPerThread)) {
      this.retire(thread);
      this.serveWaiting();
      return;
    }
    const waiter = this.waiting.shift();
    if (waiter) {
      waiter.signal?.removeEventListener('abort', waiter.onAbort);
      waiter.resolve(this.lend(thread, waiter.user));
      return;
    }
    this.idle.push(thread);
    thread.worker.unref();
    thread.idleTimer = setTimeout(() => {
      this.idle.splice(this.idle.indexOf(thread), 1);
      this.retire(thread);
    }, this.config.isolation.idleTimeoutMs);
    thread.idleTimer.unref();
  }

  /** Terminates a lent thread at once (its body must stop); a fresh one takes its place when needed. */
  discard(thread: PoolThread): void {
    thread.user = undefined;
    this.threads.delete(thread);
    void thread.worker.terminate();
    this.serveWaiting();
  }

  async onApplicationShutdown(): Promise<void> {
    await this.close();
  }

  /** Ends every thread (idle ones close their providers first) and refuses to lend any from now on. */
  async close(): Promise<void> {
    this.closed = true;
    for (const waiter of this.waiting.splice(0)) {
      waiter.signal?.removeEventListener('abort', waiter.onAbort);
      waiter.reject(new DedupQueueError('The worker threads are closed: shutting down'));
    }
    for (const thread of this.idle.splice(0)) this.retire(thread);
    // NOTE: a thread still lent now runs a body that shutdown interrupted and that ignores its signal.
    for (const thread of [...this.threads]) this.discard(thread);
    await Promise.all(this.closing);
  }

  private takeFree(): PoolThread | undefined {
    const idle = this.idle.pop();
    if (idle) return idle;
    return this.threads.size < this.config.isolation.threads ? this.spawn() : undefined;
  }

  private lend(thread: PoolThread, user: ThreadUser): PoolThread {
    clearTimeout(thread.idleTimer);
    thread.user = user;
    thread.runs += 1;
    thread.worker.ref();
    return thread;
  }

  private serveWaiting(): void {
    while (this.waiting.length > 0 && !this.closed) {
      const free = this.takeFree();
      if (!free) return;
      const waiter = this.waiting.shift()!;
      waiter.signal?.removeEventListener('abort', waiter.onAbort);
      waiter.resolve(this.lend(free, waiter.user));
    }
  }

  private spawn(): PoolThread {
    const { resourceLimits, execArgv } = this.config.isolation;
    const workerData: ThreadData = { queueNames: [...this.config.queues.keys()], inputLimits: this.config.inputLimits };
    const thread = new PoolThread(new Worker(THREAD_ENTRY, { workerData, resourceLimits, execArgv }));
    thread.worker.on('message', (message: FromThread) => {
      if (message.kind === 'log') forwardLog(message);
      else thread.user?.message(message);
    });
    thread.worker.on('error', (error) => (thread.error ??= error));
    thread.worker.on('exit', (exitCode) => this.exited(thread, exitCode));
    this.threads.add(thread);
    return thread;
  }

  private exited(thread: PoolThread, exitCode: number): void {
    thread.exited = true;
    clearTimeout(thread.idleTimer);
    this.threads.delete(thread);
    const idleAt = this.idle.indexOf(thread);
    if (idleAt >= 0) this.idle.splice(idleAt, 1);
    const user = thread.user;
    thread.user = undefined;
    if (user) user.ended(thread.error, exitCode);
    else if (thread.error) {
      this.logger.warn(`An idle worker thread of isolated workflows ended with an error: ${thread.error.message}`);
    }
    this.serveWaiting();
  }

  /** Asks a thread to close its providers and end, and terminates it if it takes longer than `CLOSE_TIMEOUT_MS`. */
  private retire(thread: PoolThread): void {
    this.threads.delete(thread);
    clearTimeout(thread.idleTimer);
    const closed = new Promise<void>((resolve) => {
      if (thread.exited) return resolve();
      const timer = setTimeout(() => void thread.worker.terminate(), CLOSE_TIMEOUT_MS).unref();
      thread.worker.once('exit', () => {
        clearTimeout(timer);
        resolve();
      });
      thread.post({ kind: 'close' });
    });
    this.closing.add(closed);
    void closed.then(() => this.closing.delete(closed));
  }
}

/** A line the thread's code logged through Nest's `Logger`: to the application's logger. */
function forwardLog({ level, message, params }: Extract<FromThread, { kind: 'log' }>): void {
  Logger[level](message, ...(params as string[]));
}
