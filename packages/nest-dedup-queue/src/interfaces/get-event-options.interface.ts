/** Options of `QueueService.getEvent()`. */
export interface GetEventOptions {
  /**
   * How long to wait for the key to be set, in milliseconds; `0` reads once without waiting. Default: 60000. After
   * it, `getEvent` resolves with `undefined`.
   */
  timeoutMs?: number;
}
