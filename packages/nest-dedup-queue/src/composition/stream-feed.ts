import type { StreamLocation, StreamPage } from '../database/streams/workflow-stream.store';
import { DatabaseUnavailableError } from '../errors/database-unavailable.error';
import { WorkflowNotFoundError } from '../errors/workflow-not-found.error';
import { backoffDelayMs } from '../utils/backoff';

/** How many entries one read of a stream takes at most. */
export const STREAM_PAGE_SIZE = 1000;
/** How a feed tries again while the database is unavailable. */
const UNAVAILABLE_RETRY = { initialDelayMs: 100, maxDelayMs: 5000 };
/** The first interval of a feed that polls (no notifications arrive); it doubles up to `pollIntervalMs`. */
const FIRST_POLL_MS = 50;

/** What a feed reads through. */
export interface FeedSource {
  locate(workflowId: string): Promise<StreamLocation | undefined>;
  read(location: StreamLocation, workflowId: string, key: string, offset: number, limit: number): Promise<StreamPage>;
  hintAtEnd(location: StreamLocation, workflowId: string): Promise<void>;
  /** Whether hints arrive (LISTEN is in place); while not, a waiting feed polls. */
  readonly listening: boolean;
  readonly pollIntervalMs: number;
}

/** What a reader waiting at an offset gets: the values from it on, and whether the stream ends after them. */
export interface FeedBatch {
  values: Array<{ offset: number; valueJson: string }>;
  ended: boolean;
}

interface Waiter {
  offset: number;
  resolve(batch: FeedBatch): void;
  reject(error: unknown): void;
}

/**
 * One stream (workflow and key) as this process's readers follow it: every reader waiting at an offset is served by
 * the same reads, one at a time, from the lowest offset waited at, so a thousand readers of one stream cost one
 * statement per change, not a thousand. A read runs when a reader comes for an offset not known to be empty, and on
 * each hint (a NOTIFY, or a write in this process); a feed that knows its readers are caught up waits for the next
 * hint, or polls when hints do not arrive.
 */
export class StreamFeed {
  /** Readers sharing the feed (it is dropped when the last one leaves). */
  readers = 0;
  private readonly waiters = new Set<Waiter>();
  private location?: StreamLocation;
  private reading = false;
  private readAgain = false;
  private hints = 0;
  /** After a read that reached the end: the offset nothing was at yet, as of the hints counted then. */
  private caughtUp?: { offset: number; hints: number };
  private timer?: NodeJS.Timeout;
  private pollMs = FIRST_POLL_MS;
  private failures = 0;
  private stopped?: unknown;

  constructor(
    private readonly source: FeedSource,
    readonly workflowId: string,
    readonly key: string,
  ) {}

  /** Resolves with the values from `offset` on as soon as there are any, or when the stream ends. */
  next(offset: number): { batch: Promise<FeedBatch>; cancel: () => void } {
    let waiter!: Waiter;
    const batch = new Promise<FeedBatch>((resolve, reject) => (waiter = { offset, resolve, reject }));
    if (this.stopped !== undefined) {
      waiter.reject(this.stopped);
    } else {
      this.waiters.add(waiter);
      const known = this.caughtUp && offset >= this.caughtUp.offset && this.caughtUp.hints === this.hints;
      if (!known) this.read();
      else this.waitForChange();
    }
    return { batch, cancel: () => this.waiters.delete(waiter) };
  }

  /** Something may have changed in the stream (a value, a close, its workflow's end). */
  hint(): void {
    this.hints += 1;
    if (this.waiters.size > 0) this.read();
  }

  /** Fails every waiting reader with `error` and every later one: the application is shutting down. */
  stop(error: unknown): void {
    this.stopped = error;
    clearTimeout(this.timer);
    for (const waiter of this.waiters) waiter.reject(error);
    this.waiters.clear();
  }

  private read(): void {
    if (this.reading) {
      this.readAgain = true;
      return;
    }
    this.reading = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    void this.readOnce().finally(() => {
      this.reading = false;
      if (this.readAgain && this.waiters.size > 0) {
        this.readAgain = false;
        this.read();
      } else {
        this.readAgain = false;
        this.waitForChange();
      }
    });
  }

  private async readOnce(): Promise<void> {
    const waiting = [...this.waiters];
    if (waiting.length === 0 || this.stopped !== undefined) return;
    const from = Math.min(...waiting.map((waiter) => waiter.offset));
    const hints = this.hints;
    let page: StreamPage;
    try {
      this.location ??= await this.source.locate(this.workflowId);
      if (!this.location) throw new WorkflowNotFoundError(this.workflowId);
      page = await this.source.read(this.location, this.workflowId, this.key, from, STREAM_PAGE_SIZE);
      if (!page.endHinted) {
        await this.source.hintAtEnd(this.location, this.workflowId);
        page = await this.source.read(this.location, this.workflowId, this.key, from, STREAM_PAGE_SIZE);
      }
      this.failures = 0;
    } catch (error) {
      if (error instanceof DatabaseUnavailableError) return this.retryLater();
      for (const waiter of waiting) {
        this.waiters.delete(waiter);
        waiter.reject(error);
      }
      return;
    }
    const full = page.entries.length === STREAM_PAGE_SIZE;
    const last = page.entries.at(-1);
    this.caughtUp = full ? undefined : { offset: last ? last.offset + 1 : from, hints };
    if (page.entries.length > 0) this.pollMs = FIRST_POLL_MS;
    for (const waiter of waiting) {
      const batch = batchFor(waiter.offset, page, full);
      if (batch) {
        this.waiters.delete(waiter);
        waiter.resolve(batch);
      } else if (full) {
        this.readAgain = true;
      }
    }
  }

  /** With readers still waiting and nothing more to read: a timer when hints do not arrive (or after a failure). */
  private waitForChange(): void {
    if (this.waiters.size === 0 || this.timer || this.reading || this.stopped !== undefined) return;
    if (this.source.listening) return;
    this.schedule(this.pollMs);
    this.pollMs = Math.min(this.pollMs * 2, this.source.pollIntervalMs);
  }

  private retryLater(): void {
    this.failures += 1;
    this.schedule(backoffDelayMs(this.failures, UNAVAILABLE_RETRY));
  }

  private schedule(ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.hint();
    }, ms);
    this.timer.unref();
  }
}

/**
 * What a read gives a reader waiting at `offset`: the values from it on, ending at a close marker; or, when the
 * page reached the stream's end while its workflow was finished, the end. Undefined: nothing for it yet.
 */
function batchFor(offset: number, page: StreamPage, full: boolean): FeedBatch | undefined {
  const values: FeedBatch['values'] = [];
  for (const entry of page.entries) {
    if (entry.offset < offset) continue;
    if (entry.closed) return { values, ended: true };
    values.push({ offset: entry.offset, valueJson: entry.valueJson ?? 'null' });
  }
  const ended = page.finished && !full;
  return values.length > 0 || ended ? { values, ended } : undefined;
}
