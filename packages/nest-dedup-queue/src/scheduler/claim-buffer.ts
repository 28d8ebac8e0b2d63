import type { Logger } from '@nestjs/common';
import { describeError } from '../database/connection/connection-monitor';
import type { ClaimedWorkflow } from '../database/workflows/claim/claimed-rows';
import type { WorkflowOutcomeStore } from '../database/workflows/finish/workflow-outcomes.store';
import type { QueueSettings } from '../queue-settings';

/** A buffered workflow not started within this long is put back in its queue, for any process to take. */
const BUFFER_HOLD_MS = 250;

/** Claimed ahead of a free slot: PENDING under this executor, started in claim order as slots free. */
interface BufferedWorkflow {
  workflow: ClaimedWorkflow;
  bufferedAt: number;
}

export interface ClaimBufferDependencies {
  store: WorkflowOutcomeStore;
  settings: QueueSettings;
  executorId: string;
  logger: Logger;
  /** Whether a slot is free for one more workflow now. */
  hasFreeSlot(): boolean;
  /** Starts a workflow in a free slot (its `remainingMs` less the time it waited here). */
  start(workflow: ClaimedWorkflow): void;
}

/**
 * The workflows of one queue claimed ahead of free slots (see `QueueWorker`): started in claim order as slots
 * free. A workflow held past `BUFFER_HOLD_MS` (after an event-loop stall its lease may have been lost and the
 * workflow recovered elsewhere), or still held when the queue's pause reaches this process or the worker stops, is
 * given back to its queue for any process to take.
 */
export class ClaimBuffer {
  private readonly entries: BufferedWorkflow[] = [];
  private timer?: NodeJS.Timeout;
  private givingBack: Promise<unknown> = Promise.resolve();
  private stopped = false;

  constructor(
    private readonly queueName: string,
    private readonly deps: ClaimBufferDependencies,
  ) {}

  get size(): number {
    return this.entries.length;
  }

  workflowIds(): string[] {
    return this.entries.map(({ workflow }) => workflow.workflowId);
  }

  /** The held workflows, each with the name its row is stored under. */
  heldRuns(): { workflowId: string; queueName: string }[] {
    return this.entries.map(({ workflow }) => ({
      workflowId: workflow.workflowId,
      queueName: workflow.storedQueueName,
    }));
  }

  /** Starts what a claim took in free slots and holds the rest (gives them back at once once stopped). */
  add(workflows: ClaimedWorkflow[]): void {
    const bufferedAt = performance.now();
    for (const workflow of workflows) this.entries.push({ workflow, bufferedAt });
    this.startInFreeSlots();
    if (this.stopped) this.giveBack(this.entries.splice(0));
    else if (this.entries.length > 0) this.timer ??= setTimeout(() => this.giveBackStale(), BUFFER_HOLD_MS).unref();
  }

  /** Starts held workflows in the free slots; gives them all back while the queue is paused, and the stale ones. */
  startInFreeSlots(): void {
    if (this.deps.settings.effective(this.queueName).paused) return this.giveBack(this.entries.splice(0));
    const stale: BufferedWorkflow[] = [];
    while (this.entries.length > 0 && this.deps.hasFreeSlot()) {
      const entry = this.entries.shift()!;
      const waited = performance.now() - entry.bufferedAt;
      if (waited > BUFFER_HOLD_MS) stale.push(entry);
      else this.deps.start({ ...entry.workflow, remainingMs: remainingAfter(entry.workflow.remainingMs, waited) });
    }
    this.giveBack(stale);
  }

  /** Removes a held workflow (of `attempt` or earlier, when given); whether one was. */
  drop(workflowId: string, attempt?: number): boolean {
    const index = this.entries.findIndex(
      ({ workflow }) => workflow.workflowId === workflowId && (attempt === undefined || workflow.attempts <= attempt),
    );
    if (index >= 0) this.entries.splice(index, 1);
    return index >= 0;
  }

  /** Gives back everything held, now and from now on. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.giveBack(this.entries.splice(0));
  }

  /** Resolves when every give-back so far is written (or failed: those stay PENDING for recovery). */
  async givenBack(): Promise<void> {
    await this.givingBack;
  }

  private giveBackStale(): void {
    this.timer = undefined;
    const heldSince = performance.now() - BUFFER_HOLD_MS;
    const firstFresh = this.entries.findIndex(({ bufferedAt }) => bufferedAt > heldSince);
    this.giveBack(this.entries.splice(0, firstFresh < 0 ? this.entries.length : firstFresh));
    if (this.entries.length > 0) this.timer = setTimeout(() => this.giveBackStale(), BUFFER_HOLD_MS).unref();
  }

  private giveBack(entries: BufferedWorkflow[]): void {
    const byStoredName = new Map<string, { workflowId: string; attempt: number }[]>();
    for (const { workflow } of entries) {
      const runs = byStoredName.get(workflow.storedQueueName) ?? [];
      runs.push({ workflowId: workflow.workflowId, attempt: workflow.attempts });
      byStoredName.set(workflow.storedQueueName, runs);
    }
    for (const [storedQueueName, runs] of byStoredName) {
      const given = this.deps.store.giveBack(this.deps.executorId, storedQueueName, runs).catch((error: unknown) => {
        this.deps.logger.warn(
          `Giving back ${runs.length} buffered workflow(s) of queue "${this.queueName}" failed (they stay PENDING ` +
            `for recovery): ${describeError(error)}`,
        );
      });
      this.givingBack = Promise.all([this.givingBack, given]);
    }
  }
}

/** A claim's time left until its timeout, `waitedMs` later. */
function remainingAfter(remainingMs: number | null, waitedMs: number): number | null {
  return remainingMs === null ? null : remainingMs - waitedMs;
}
