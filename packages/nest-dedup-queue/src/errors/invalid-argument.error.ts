import { DedupQueueError } from './dedup-queue.error';

/** Thrown before anything is written when a call's arguments or options are not acceptable. */
export class InvalidArgumentError extends DedupQueueError {
  constructor(
    /** The argument or option at fault, e.g. `'options.deduplicationId'` or `'args[0].user'`. */
    readonly field: string,
    reason: string,
  ) {
    super(`${field} ${reason}`);
  }
}
