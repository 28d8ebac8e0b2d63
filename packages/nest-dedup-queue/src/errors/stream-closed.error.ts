import { DedupQueueError } from './dedup-queue.error';

/**
 * Thrown by `writeStream` on a stream that `closeStream` closed: nothing was appended, and its readers had already
 * been told it ended. Not recorded: a re-executed body meets the closed stream again. Write to another key.
 */
export class StreamClosedError extends DedupQueueError {
  constructor(
    readonly workflowId: string,
    readonly key: string,
  ) {
    super(`Stream "${key}" of workflow "${workflowId}" is closed: nothing more can be written to it`);
  }
}
