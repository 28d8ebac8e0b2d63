/** Options of `QueueService.cancel()`. */
export interface CancelOptions {
  /**
   * Also cancel every unfinished descendant, in the same call: the workflows this workflow's body enqueued, theirs,
   * and so on to any depth (through finished ones), whatever their state (ENQUEUED, DELAYED, PENDING, WAITING, or
   * dead-lettered); never a workflow it only joined (a holder returned by `onDuplicate: 'return-existing'`).
   * Default: false.
   */
  cancelChildren?: boolean;
}
