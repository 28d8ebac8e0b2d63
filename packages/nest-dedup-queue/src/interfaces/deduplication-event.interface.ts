/**
 * What happened to an enqueue whose deduplication ID was held: `rejected` (`QueueDeduplicatedError`),
 * `returned-existing`, `replaced`, `queued-next`, `superseded` (the holder was cancelled and this call's workflow
 * took the key; `existingWorkflowId` is the cancelled holder), `mismatched` (`requireSameArgs`: the holder's
 * arguments differ, `DeduplicationMismatchError`), `sent` (`onDuplicate: 'send'`: the arguments went to the holder as
 * a message).
 */
export type DeduplicationOutcome =
  'rejected' | 'returned-existing' | 'replaced' | 'queued-next' | 'superseded' | 'mismatched' | 'sent';

/** One deduplication hit, as given to `QueueService.onDeduplicated()` listeners. */
export interface DeduplicationEvent {
  queueName: string;
  deduplicationId: string;
  /** The workflow that held the key. */
  existingWorkflowId: string;
  outcome: DeduplicationOutcome;
}
