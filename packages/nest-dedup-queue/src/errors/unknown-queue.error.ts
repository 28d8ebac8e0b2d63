import { DedupQueueError } from './dedup-queue.error';

/** Thrown when enqueueing into a queue that `DedupQueueModule.forRoot({ queues })` did not declare. */
export class UnknownQueueError extends DedupQueueError {
  constructor(readonly queueName: string, declared: readonly string[]) {
    super(
      `Queue "${queueName}" is not declared; add { name: '${queueName}' } to DedupQueueModule.forRoot({ queues }) ` +
        `(declared: ${declared.map((name) => `"${name}"`).join(', ') || 'none'})`,
    );
  }
}
