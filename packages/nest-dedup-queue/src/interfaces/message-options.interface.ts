/** Options of `QueueService.send`. */
export interface SendOptions {
  /** The topic, which `recv(topic)` receives from; left out, the default topic (`recv()` without a topic). */
  topic?: string;
  /**
   * Delivers the message once however many times it is sent with this key (per receiving workflow): a sender that
   * retries after a lost answer, or a workflow step that sends, gives a key.
   */
  idempotencyKey?: string;
}

/** Options of `recv`. */
export interface RecvOptions {
  /** How long to wait for a message, in milliseconds. Default 60 000; `Infinity` waits without a limit. */
  timeoutMs?: number;
}
