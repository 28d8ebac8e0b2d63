import type { HeldRun, NotOwnedWorkflow } from '../database/executors/executor.store';
import { type InterruptPayload, parseInterruptPayload } from '../database/workflows/interrupt-payload';
import { backoffDelayMs } from '../utils/backoff';

/** What `CancelHints` asks of the scheduler. */
export interface CancelHintsDependencies {
  /**
   * The queues whose worker here may hold the workflow (runs it, buffers it, or has a claim in flight that may take
   * it); none when no worker may.
   */
  queuesThatMayHold(workflowId: string): string[];
  /** Why this executor no longer owns some of `runs` (`ExecutorStore.notOwned`). */
  lookUp(runs: HeldRun[]): Promise<NotOwnedWorkflow[]>;
  /** The workflow is CANCELLED (or timed out) in the database: its run here stops. */
  release(cancelled: InterruptPayload): void;
  /** A workflow held nowhere here ended: queues with global limits look for work (it may have held a slot). */
  endedElsewhere(): void;
  /** Checks every run of this process against the database and stops those no longer owned. */
  checkEveryRun(): Promise<void>;
  /** False once the scheduler stopped. */
  active(): boolean;
  failed(error: unknown): void;
}

const RETRY_BACKOFF = { initialDelayMs: 100, maxDelayMs: 5000 };

/**
 * The cancel channel's notifications, taken as hints: any role that can connect to the database may NOTIFY any
 * channel, so a notification never stops a run by itself. The workflows it names that this process may hold are
 * looked up in the database, and only those that are CANCELLED there (in the run held here, or a later one) are
 * released; a forged notification changes nothing. A notification without a workflow ID (see `interruptPayload`),
 * or none at all (LISTEN reconnected: some may be lost), has every run checked. Notifications arriving together are
 * confirmed by one statement; a confirmation that fails is tried again.
 */
export class CancelHints {
  /** The workflows named by hints not confirmed yet, each with the queues it may be of. */
  private readonly pending = new Map<string, Set<string>>();
  private everyRun = false;
  private confirming?: Promise<void>;

  constructor(private readonly deps: CancelHintsDependencies) {}

  /** A payload of the cancel channel (undefined after a reconnect). */
  announce(payload: string | undefined): void {
    const workflowId = payload === undefined ? '' : parseInterruptPayload(payload).workflowId;
    const queues = workflowId === '' ? [] : this.deps.queuesThatMayHold(workflowId);
    if (workflowId === '') this.everyRun = true;
    else if (queues.length > 0) this.hold(workflowId, queues);
    else return this.deps.endedElsewhere();
    this.confirming ??= this.confirm().finally(() => (this.confirming = undefined));
  }

  private hold(workflowId: string, queues: string[]): void {
    const held = this.pending.get(workflowId) ?? new Set<string>();
    for (const queueName of queues) held.add(queueName);
    this.pending.set(workflowId, held);
  }

  private async confirm(): Promise<void> {
    for (let failures = 0; (this.pending.size > 0 || this.everyRun) && this.deps.active();) {
      // NOTE: one turn of the event loop gathers the notifications that arrived together (a cancelMany).
      await new Promise((resolve) => setImmediate(resolve));
      const runs = [...this.pending].flatMap(([workflowId, queues]) =>
        [...queues].map((queueName) => ({ workflowId, queueName })),
      );
      this.pending.clear();
      if (this.everyRun) {
        this.everyRun = false;
        await this.deps.checkEveryRun();
      }
      if (runs.length === 0) continue;
      try {
        for (const run of await this.deps.lookUp(runs)) {
          if (run.reason !== 'ownership-lost') {
            this.deps.release({ workflowId: run.workflowId, reason: run.reason, attempt: run.attempt });
          }
        }
        failures = 0;
      } catch (error) {
        this.deps.failed(error);
        for (const { workflowId, queueName } of runs) this.hold(workflowId, [queueName]);
        await new Promise((resolve) => setTimeout(resolve, backoffDelayMs(++failures, RETRY_BACKOFF)).unref());
      }
    }
  }
}
