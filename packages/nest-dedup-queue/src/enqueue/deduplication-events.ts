import { Injectable } from '@nestjs/common';
import type { DeduplicationEvent } from '../interfaces/deduplication-event.interface';
import { WorkflowLifecycle } from '../observability/workflow-lifecycle.events';
import { ModuleLogger } from '../utils/module-logger';
import { logicalQueueName } from '../utils/queue-shards';

/**
 * Counts deduplication hits per queue and tells listeners about each one (the `onDeduplicated` listeners, then
 * the workflow lifecycle: metrics, tracing, `@OnWorkflowEvent('deduplicated')`). Hits are expected: nothing is logged.
 */
@Injectable()
export class DeduplicationEvents {
  private readonly logger = new ModuleLogger('DedupQueue');
  private readonly listeners = new Set<(event: DeduplicationEvent) => void>();
  private readonly counts = new Map<string, number>();

  constructor(private readonly lifecycle: WorkflowLifecycle) {}

  listen(listener: (event: DeduplicationEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Hits per queue since this process started. */
  countsByQueue(): Record<string, number> {
    return Object.fromEntries(this.counts);
  }

  /** One hit of an enqueue of `workflowName`. */
  emit(stored: DeduplicationEvent, workflowName: string): void {
    const event = { ...stored, queueName: logicalQueueName(stored.queueName) };
    this.counts.set(event.queueName, (this.counts.get(event.queueName) ?? 0) + 1);
    for (const listener of this.listeners) {
      try {
        listener(event);
      } catch (error) {
        this.logger.warn(`A deduplication listener threw: ${(error as Error).message}`);
      }
    }
    this.lifecycle.emit({
      event: 'deduplicated',
      workflowId: event.existingWorkflowId,
      queueName: event.queueName,
      workflowName,
      deduplicationId: event.deduplicationId,
      outcome: event.outcome,
    });
  }
}
