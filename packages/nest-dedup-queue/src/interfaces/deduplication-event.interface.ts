/** What happened to an enqueue whose deduplication ID was held. */
export type DeduplicationOutcome = 'rejected' | 'returned-existing' | 'replaced' | 'queued-next';

/** One deduplication hit, as given to `QueueService.onDeduplicated()` listeners. */
export interface DeduplicationEvent {
  queueName: string;
  deduplicationId: string;
  /** The workflow that held the key. */
  existingWorkflowId: string;
  outcome: DeduplicationOutcome;
}
