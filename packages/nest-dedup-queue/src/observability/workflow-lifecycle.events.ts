import { Injectable } from '@nestjs/common';
import type { WorkflowOutcome } from '../database/workflows/finish/workflow-outcomes.store';
import type { WorkflowRef } from '../database/workflows/workflow-ref';
import type { WorkflowEvent } from '../interfaces/workflow-event.interface';
import { ModuleLogger } from '../utils/module-logger';
import { logicalQueueName } from '../utils/queue-shards';

/** The changes of state that are not public events: they feed metrics and tracing only. */
type InternalEvent =
  | { event: 'enqueued' }
  /** `waitSeconds`: from when it became due to this start; null after a recovery (the lost run's wait). */
  | { event: 'started'; attempt: number; waitSeconds: number | null }
  /** A failed attempt that will be tried again. */
  | { event: 'retrying'; attempt: number; durationMs: number };

/** One change of state of a workflow, in the process that made it. */
export type LifecycleEvent =
  WorkflowEvent | (InternalEvent & Pick<WorkflowEvent, 'workflowId' | 'queueName' | 'workflowName'>);

/**
 * The event for a run's recorded outcome: completed, failed, (a failed attempt to be tried again) retrying, or
 * (parked by a code change) dead-lettered.
 */
/** The name of `runOutcomeEvent`'s event for `outcome`. */
export function runOutcomeEventName(outcome: WorkflowOutcome): LifecycleEvent['event'] {
  switch (outcome.status) {
    case 'SUCCESS':
      return 'completed';
    case 'RETRY':
      return 'retrying';
    case 'PARKED':
      return 'dead-lettered';
    default:
      return 'failed';
  }
}

export function runOutcomeEvent(
  workflow: WorkflowRef,
  attempt: number,
  outcome: WorkflowOutcome,
  durationMs: number,
): LifecycleEvent {
  switch (outcome.status) {
    case 'SUCCESS':
      return { event: 'completed', ...workflow, attempt, durationMs };
    case 'RETRY':
      return { event: 'retrying', ...workflow, attempt, durationMs };
    case 'PARKED':
      return { event: 'dead-lettered', ...workflow, attempt, ...(outcome.error ? { error: outcome.error } : {}) };
    default:
      return { event: 'failed', ...workflow, attempt, durationMs, ...(outcome.error ? { error: outcome.error } : {}) };
  }
}

export type LifecycleListener = (event: LifecycleEvent) => void;

/**
 * The one place where the enqueuer, the workers and the heartbeat announce what happened to a workflow: metrics,
 * tracing and `@OnWorkflowEvent()` handlers listen here. A listener that throws is logged and skipped; the caller
 * never sees it.
 */
@Injectable()
export class WorkflowLifecycle {
  private readonly logger = new ModuleLogger('DedupQueue');
  /** Each listener, with the events it listens for (undefined: all). */
  private readonly listeners = new Map<LifecycleListener, ReadonlySet<string> | undefined>();

  /** Calls `listener` for each event, or (with `events`) for those events only. Returns a function that removes it. */
  listen(listener: LifecycleListener, events?: readonly LifecycleEvent['event'][]): () => void {
    this.listeners.set(listener, events && new Set(events));
    return () => this.listeners.delete(listener);
  }

  /** Whether a listener would be called for `event`: on hot paths, the event is built only then. */
  wants(event: LifecycleEvent['event']): boolean {
    for (const events of this.listeners.values()) if (!events || events.has(event)) return true;
    return false;
  }

  /** Calls the listeners of `event`, which names the queue of a shard's stored name (see `logicalQueueName`). */
  emit(stored: LifecycleEvent): void {
    const queueName = logicalQueueName(stored.queueName);
    const event = queueName === stored.queueName ? stored : { ...stored, queueName };
    for (const [listener, events] of this.listeners) {
      if (events && !events.has(event.event)) continue;
      try {
        listener(event);
      } catch (error) {
        this.logger.error(`A listener of workflow "${event.event}" events threw: ${(error as Error).message}`);
      }
    }
  }
}
