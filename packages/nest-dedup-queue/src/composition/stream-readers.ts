import { BeforeApplicationShutdown, Injectable, MessageEvent } from '@nestjs/common';
import { Observable } from 'rxjs';
import { DedupQueueConfig } from '../dedup-queue.config';
import { QueueDatabase } from '../database/connection/queue-database';
import {
  type StreamLocation,
  type WorkflowStreamStore,
  workflowStreamStore,
} from '../database/streams/workflow-stream.store';
import { DedupQueueError } from '../errors/dedup-queue.error';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import type { ReadStreamOptions, StreamEventsOptions, StreamValue } from '../interfaces/stream-options.interface';
import { NotificationListener } from '../notifications/notification.listener';
import { fromStoredJson } from '../utils/stored-json';
import { type FeedBatch, type FeedSource, StreamFeed } from './stream-feed';
import { attachStreamReaders } from './workflow-streams';
import { requiredKey } from '../utils/enqueue-options.validation';

/** The error that ends the readers of a process that shuts down (`streamEvents` ends its events without `end`). */
class ShuttingDownError extends DedupQueueError {
  constructor() {
    super('The application is shutting down: the stream was not read to its end; read it again from its next offset');
  }
}

/**
 * Reads durable streams for this process (`QueueService.readStream`, `streamEvents`): one feed per stream followed,
 * shared by all its readers, woken by hints on the stream channel of the LISTEN connection the module holds (opened
 * here in a process that runs no workers) and by writes in this process; polling only while hints do not arrive.
 */
@Injectable()
export class StreamReaders implements BeforeApplicationShutdown {
  private readonly store: WorkflowStreamStore;
  private readonly feeds = new Map<string, StreamFeed>();
  private readonly feedsOfWorkflows = new Map<string, Set<StreamFeed>>();
  private listening?: Promise<void>;
  private shutDown = false;
  private readonly source: FeedSource;

  constructor(
    private readonly database: QueueDatabase,
    private readonly config: DedupQueueConfig,
    private readonly listener: NotificationListener,
  ) {
    this.store = workflowStreamStore(database);
    const { store, listener: notifications } = this;
    this.source = {
      locate: (workflowId) => store.locate(workflowId),
      read: (location, workflowId, key, offset, limit) => store.read(location, workflowId, key, offset, limit),
      hintAtEnd: (location: StreamLocation, workflowId) => store.hintAtEnd(location, workflowId),
      get listening() {
        return notifications.listening;
      },
      pollIntervalMs: config.pollIntervalMs,
    };
    attachStreamReaders(database, (workflowId) => this.hint(workflowId));
  }

  /** See `QueueService.readStream`. */
  readStream<T = unknown>(
    workflowId: string,
    key: string,
    options: ReadStreamOptions = {},
  ): AsyncIterable<StreamValue<T>> {
    requiredKey(workflowId, 'workflowId');
    requiredKey(key, 'key');
    const offset = options?.offset ?? 0;
    if (!Number.isSafeInteger(offset) || offset < 0) {
      throw new InvalidArgumentError('options.offset', 'must be an integer, 0 or more');
    }
    return { [Symbol.asyncIterator]: () => this.reader<T>(workflowId, key, offset) };
  }

  /** See `QueueService.streamEvents`. */
  streamEvents(workflowId: string, key: string, options: StreamEventsOptions = {}): Observable<MessageEvent> {
    requiredKey(workflowId, 'workflowId');
    requiredKey(key, 'key');
    const offset = offsetAfter(options?.lastEventId);
    return new Observable<MessageEvent>((subscriber) => {
      const reader = this.reader<unknown>(workflowId, key, offset);
      let last = offset - 1;
      void (async () => {
        try {
          for (;;) {
            const next = await reader.next();
            if (next.done === true) break;
            const value = next.value;
            last = value.offset;
            subscriber.next({ id: String(value.offset), data: eventData(value.value) });
          }
          subscriber.next({ id: String(last), type: 'end', data: { offset: last + 1 } });
          subscriber.complete();
        } catch (error) {
          if (error instanceof ShuttingDownError) subscriber.complete();
          else subscriber.error(error);
        }
      })();
      return () => void reader.return?.();
    });
  }

  beforeApplicationShutdown(): Promise<void> | void {
    this.shutDown = true;
    for (const feed of this.feeds.values()) feed.stop(new ShuttingDownError());
    if (!this.config.worker && this.listening) return this.listener.stop();
  }

  /** A hint for a workflow's streams; for all of them when there is no ID (a reconnect, an ID too long to carry). */
  private hint(workflowId: string | undefined): void {
    const feeds = workflowId ? (this.feedsOfWorkflows.get(workflowId) ?? []) : this.feeds.values();
    for (const feed of [...feeds]) feed.hint();
  }

  /** An iterator over one stream from `offset`: it holds a share of the stream's feed from its first `next()`. */
  private reader<T>(workflowId: string, key: string, offset: number): AsyncIterableIterator<StreamValue<T>> {
    let feed: StreamFeed | undefined;
    let buffered: FeedBatch['values'] = [];
    let ended = false;
    let cancelWait: (() => void) | undefined;
    let finish: ((result: IteratorResult<StreamValue<T>>) => void) | undefined;
    const leave = () => {
      ended = true;
      cancelWait?.();
      if (feed) this.release(feed);
      feed = undefined;
    };
    const iterator: AsyncIterableIterator<StreamValue<T>> = {
      next: async () => {
        if (buffered.length === 0 && !ended) {
          if (this.shutDown) throw new ShuttingDownError();
          feed ??= this.acquire(workflowId, key);
          await this.listen();
          const wait = feed.next(offset);
          cancelWait = () => wait.cancel();
          const batch = await Promise.race([
            wait.batch,
            new Promise<undefined>((resolve) => (finish = () => resolve(undefined))),
          ]).catch((error: unknown) => {
            leave();
            throw error;
          });
          cancelWait = undefined;
          finish = undefined;
          if (batch) {
            buffered = batch.values;
            if (batch.ended) leave();
          }
        }
        const entry = buffered.shift();
        if (!entry) {
          leave();
          return { done: true, value: undefined };
        }
        offset = entry.offset + 1;
        return { done: false, value: { offset: entry.offset, value: fromStoredJson<T>(entry.valueJson) } };
      },
      return: () => {
        buffered = [];
        leave();
        finish?.({ done: true, value: undefined });
        return Promise.resolve({ done: true, value: undefined });
      },
      [Symbol.asyncIterator]: () => iterator,
    };
    return iterator;
  }

  private acquire(workflowId: string, key: string): StreamFeed {
    const id = JSON.stringify([workflowId, key]);
    let feed = this.feeds.get(id);
    if (!feed) {
      feed = new StreamFeed(this.source, workflowId, key);
      this.feeds.set(id, feed);
      const ofWorkflow = this.feedsOfWorkflows.get(workflowId) ?? new Set();
      ofWorkflow.add(feed);
      this.feedsOfWorkflows.set(workflowId, ofWorkflow);
    }
    feed.readers += 1;
    return feed;
  }

  private release(feed: StreamFeed): void {
    feed.readers -= 1;
    if (feed.readers > 0) return;
    this.feeds.delete(JSON.stringify([feed.workflowId, feed.key]));
    const ofWorkflow = this.feedsOfWorkflows.get(feed.workflowId);
    ofWorkflow?.delete(feed);
    if (ofWorkflow?.size === 0) this.feedsOfWorkflows.delete(feed.workflowId);
  }

  /** Listens on the stream channel (once): on the module's LISTEN connection, or one of its own in a non-worker. */
  private listen(): Promise<void> {
    this.listening ??= this.listener.listenTo(this.store.channel, (payload) => this.hint(payload));
    return this.listening;
  }
}

/**
 * A value as an event's data: an object or array as it is (Nest sends it as JSON), anything else as its JSON text,
 * so that the data of every event is the value as JSON on the wire (`JSON.parse(event.data)` in the browser).
 */
function eventData(value: unknown): string | object {
  return typeof value === 'object' && value !== null ? value : JSON.stringify(value);
}

/** The offset after `Last-Event-ID` (the offset of the last event received; -1 for none): where events resume. */
function offsetAfter(lastEventId: string | number | undefined): number {
  if (lastEventId === undefined || lastEventId === null || lastEventId === '') return 0;
  const last = typeof lastEventId === 'number' ? lastEventId : Number(lastEventId);
  if (!Number.isSafeInteger(last) || last < -1 || (typeof lastEventId === 'string' && !/^-?\d+$/.test(lastEventId))) {
    throw new InvalidArgumentError('options.lastEventId', 'must be the offset of an event (an integer, -1 or more)');
  }
  return last + 1;
}
