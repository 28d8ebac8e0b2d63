import type { HolderReport } from '../database/workflows/enqueue/insert-results';
import type { KeyHolderStore } from '../database/workflows/enqueue/key-holders.store';

/** Reads in flight at once: one being answered while the next gathers the refusals that arrive meanwhile. */
const MAX_IN_FLIGHT = 2;
const MAX_BATCH = 500;

interface PendingRead {
  workflowId: string;
  settle: (report: HolderReport | undefined) => void;
}

/**
 * Reads what a refused duplicate tells about its holder (`KeyHolderStore.holderReports`), combining the reads of
 * concurrent refusals of one queue into one statement, as `EnqueueBatcher` combines their inserts: a lone read is
 * sent at once, those that arrive while reads are in flight go together in the next one. Each read starts after its
 * refusal. A failed read (or a holder gone by then) gives undefined: the refusal is thrown without the holder's state.
 */
export class HolderReports {
  private readonly queued = new Map<string, PendingRead[]>();
  private inFlight = 0;

  constructor(private readonly holders: KeyHolderStore) {}

  read(queueName: string, workflowId: string): Promise<HolderReport | undefined> {
    return new Promise((settle) => {
      const reads = this.queued.get(queueName);
      if (reads) reads.push({ workflowId, settle });
      else this.queued.set(queueName, [{ workflowId, settle }]);
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < MAX_IN_FLIGHT && this.queued.size > 0) {
      const [queueName, reads] = this.queued.entries().next().value as [string, PendingRead[]];
      const batch = reads.splice(0, MAX_BATCH);
      if (reads.length === 0) this.queued.delete(queueName);
      this.inFlight += 1;
      void this.send(queueName, batch).finally(() => {
        this.inFlight -= 1;
        this.pump();
      });
    }
  }

  private async send(queueName: string, batch: PendingRead[]): Promise<void> {
    try {
      const ids = [...new Set(batch.map((read) => read.workflowId))];
      const reports = await this.holders.holderReports(queueName, ids);
      for (const read of batch) read.settle(reports.get(read.workflowId));
    } catch {
      for (const read of batch) read.settle(undefined);
    }
  }
}
