import { Injectable, Logger } from '@nestjs/common';
import type { DeduplicationEvent } from '../interfaces/deduplication-event.interface';

/** Counts deduplication hits per queue and tells listeners about each one. Hits are expected: nothing is logged. */
@Injectable()
export class DeduplicationEvents {
  private readonly logger = new Logger('DedupQueue');
  private readonly listeners = new Set<(event: DeduplicationEvent) => void>();
  private readonly counts = new Map<string, number>();

  listen(listener: (event: DeduplicationEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Hits per queue since this process started. */
  countsByQueue(): Record<string, number> {
    return Object.fromEntries(this.counts);
  }

  emit(event: DeduplicationEvent): void {
    this.counts.set(event.queueName, (this.counts.get(event.queueName) ?? 0) + 1);
    for (const listener of this.listeners) {
      try {
        listener(event);
      } catch (error) {
        this.logger.warn(`A deduplication listener threw: ${(error as Error).message}`);
      }
    }
  }
}
