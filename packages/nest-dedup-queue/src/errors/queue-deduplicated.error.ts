import type { WorkflowStatus } from '../interfaces/workflow-status.interface';
import { DedupQueueError } from './dedup-queue.error';

/** What a `QueueDeduplicatedError` knows about the workflow that holds the key, when it could read it. */
export interface DeduplicationHolderState {
  /**
   * The holder's status as the refused insert's statement saw it, or as read just after the refusal when the holder
   * committed while that statement ran (or when the duplicate policy looked the holder up again).
   */
  status?: WorkflowStatus;
  /** A `DELAYED` holder's start time. */
  startsAt?: Date;
  /** A finished holder's deduplication window: the key is free from then on. */
  windowEndsAt?: Date;
  /** More about the holder, appended to the message (e.g. that no live executor would run it). */
  note?: string;
}

/**
 * Thrown by `QueueService.enqueue()` when the deduplication ID is held in the same queue: by a workflow that is
 * queued, delayed, running or waiting, by a dead letter that keeps its key, or by a finished workflow within its
 * deduplication window. The message says which. Nothing was written. `DedupExceptionFilter` turns it into HTTP 409.
 */
export class QueueDeduplicatedError extends DedupQueueError {
  /**
   * The holder's status when the enqueue was refused (`DeduplicationHolderState.status`); undefined when it had ended
   * by the time it was read (or could not be read).
   */
  readonly existingStatus?: WorkflowStatus;
  /** When the holder is a finished workflow within its deduplication window: when the window ends. */
  readonly windowEndsAt?: Date;

  constructor(
    /** The queue the enqueue targeted. */
    readonly queueName: string,
    /** The deduplication ID that is taken. */
    readonly deduplicationId: string,
    /** The workflow that holds the deduplication ID. */
    readonly existingWorkflowId: string,
    holder: DeduplicationHolderState = {},
  ) {
    super(
      `Deduplication ID "${deduplicationId}" is held in queue "${queueName}" by workflow "${existingWorkflowId}", ` +
        describeHolder(holder) +
        (holder.note ? `; ${holder.note}` : ''),
    );
    this.existingStatus = holder.status;
    this.windowEndsAt = holder.windowEndsAt;
  }
}

function describeHolder({ status, startsAt, windowEndsAt }: DeduplicationHolderState): string {
  if (windowEndsAt && status !== undefined) {
    return `which ended (${status}) and holds the key in its deduplication window until ${windowEndsAt.toISOString()}`;
  }
  switch (status) {
    case 'ENQUEUED':
      return 'which is queued';
    case 'DELAYED':
      return startsAt ? `which is delayed until ${startsAt.toISOString()}` : 'which is delayed';
    case 'PENDING':
      return 'which is running';
    case 'WAITING':
      return 'which is waiting (suspended in sleep() or recv())';
    case 'MAX_RECOVERY_ATTEMPTS_EXCEEDED':
      return 'which is dead-lettered and keeps the key until it is resumed or cancelled';
    default:
      return 'which held it when the enqueue was refused (it may have ended since)';
  }
}
