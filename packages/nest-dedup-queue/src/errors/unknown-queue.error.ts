import { DedupQueueError } from './dedup-queue.error';

/** Thrown when enqueueing into a queue that neither `forRoot({ queues })` nor a `registerQueue()` declared. */
export class UnknownQueueError extends DedupQueueError {
  constructor(
    readonly queueName: string,
    declared: readonly string[],
  ) {
    super(
      `Queue "${queueName}" is not declared; add { name: '${queueName}' } to DedupQueueModule.forRoot({ queues }) ` +
        `or declare it with DedupQueueModule.registerQueue({ name: '${queueName}' }) ` +
        `(declared: ${declared.map((name) => `"${name}"`).join(', ') || 'none'})`,
    );
  }
}
