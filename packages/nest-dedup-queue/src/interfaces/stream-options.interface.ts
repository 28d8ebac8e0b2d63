/** Where `QueueService.readStream` starts. */
export interface ReadStreamOptions {
  /** The first offset to yield (0, the default, is the stream's first value). */
  offset?: number;
}

/** Where `QueueService.streamEvents` resumes. */
export interface StreamEventsOptions {
  /**
   * The `Last-Event-ID` header an `EventSource` sends when it reconnects (the offset of the last event it
   * received): the events resume after it. Left out (or empty), they start at the stream's first value.
   */
  lastEventId?: string | number;
}

/** One value of a durable stream, at its offset (0, 1, ...). */
export interface StreamValue<T = unknown> {
  offset: number;
  value: T;
}
