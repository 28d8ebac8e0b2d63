/** Options of `QueueService.cancel()`. */
export interface CancelOptions {
  /**
   * Also cancel the unfinished (ENQUEUED, DELAYED or PENDING) workflows this workflow's body enqueued, and theirs in
   * turn; never a workflow it only joined (a holder returned by `onDuplicate: 'return-existing'`). Default: false.
   */
  cancelChildren?: boolean;
}
