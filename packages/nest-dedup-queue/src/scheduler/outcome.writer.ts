import { Injectable, Logger } from '@nestjs/common';
import { DedupQueueConfig, hasGlobalLimits } from '../dedup-queue.config';
import type { AttachedClaim } from '../database/workflow-claimer';
import { type WorkflowOutcome, WorkflowStore } from '../database/workflow.store';
import { QueueSettings } from '../queue-settings';
import { FailureLog } from '../utils/failure-log';

const MAX_BATCH = 500;
/** Writes in flight at once: one being answered while the next records what finished meanwhile. */
const MAX_IN_FLIGHT = 2;
const RETRY_DELAY_MS = 500;

/** A worker's next claim, made in the statement that records its finished workflows. */
export interface ClaimWithOutcomes extends AttachedClaim {
  /** Called with the claimed rows (JSON text) before the outcomes settle, or with the error of the statement. */
  deliver(claimedJson: string[] | undefined, error?: unknown): void;
}

type ClaimWithOutcomesHook = (queueName: string, outcomes: WorkflowOutcome[]) => ClaimWithOutcomes | undefined;

interface QueuedOutcome {
  outcome: WorkflowOutcome;
  queueName: string;
  settle: (recorded: boolean) => void;
}

/**
 * Records workflow outcomes, combining those that finish in the same turn of the event loop, or while writes are in
 * flight, into one statement (group commit): one round trip for many completions, no timer for a lone one. The
 * worker of the batch's first queue may attach its next claim to the statement (`attachClaims`), so that finishing
 * and claiming take one round trip and one commit. A failed write is retried until it succeeds or the writer is
 * closed; an unwritten outcome leaves its workflow PENDING (to be recovered), never marked done. A queue with global
 * limits has its workers woken everywhere by the write (a freed slot there may let another process start work).
 */
@Injectable()
export class OutcomeWriter {
  private readonly logger = new Logger('DedupQueueScheduler');
  private queued: QueuedOutcome[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private sendScheduled = false;
  private closed = false;
  private claimWith: ClaimWithOutcomesHook = () => undefined;
  private readonly failures = new FailureLog(this.logger);

  constructor(
    private readonly store: WorkflowStore,
    private readonly config: DedupQueueConfig,
    private readonly settings: QueueSettings,
  ) {}

  /** Lets the workers attach their next claim to the write of their queue's outcomes (see the class doc). */
  attachClaims(hook: ClaimWithOutcomesHook): void {
    this.claimWith = hook;
  }

  /** Resolves with whether the outcome was recorded (false: the workflow was no longer PENDING under this executor). */
  write(outcome: WorkflowOutcome, queueName: string): Promise<boolean> {
    return new Promise((settle) => {
      this.queued.push({ outcome, queueName, settle });
      this.sendSoon();
    });
  }

  /** Waits until everything queued so far has been written. */
  async drained(): Promise<void> {
    while (this.inFlight.size > 0 || this.queued.length > 0) {
      await (this.inFlight.size > 0 ? Promise.all(this.inFlight) : new Promise((resolve) => setImmediate(resolve)));
    }
  }

  /** Stops retrying failed writes; what is still unwritten settles as not recorded. */
  close(): void {
    this.closed = true;
  }

  /** Sends what is queued once the current turn of the event loop is over (so that it can gather more). */
  private sendSoon(): void {
    if (this.sendScheduled) return;
    this.sendScheduled = true;
    setImmediate(() => {
      this.sendScheduled = false;
      this.send();
    });
  }

  private send(): void {
    while (this.inFlight.size < MAX_IN_FLIGHT && this.queued.length > 0) {
      const batch = this.queued.splice(0, MAX_BATCH);
      const writing: Promise<void> = this.writeWithRetry(batch)
        .then((recorded) => {
          for (const item of batch) item.settle(recorded.has(item.outcome.workflowId));
        })
        .finally(() => {
          this.inFlight.delete(writing);
          this.sendSoon();
        });
      this.inFlight.add(writing);
    }
  }

  private async writeWithRetry(batch: QueuedOutcome[]): Promise<Set<string>> {
    const wake = [...new Set(batch.map((item) => item.queueName))].filter((queueName) =>
      hasGlobalLimits(this.settings.effective(queueName)),
    );
    const firstQueue = batch[0].queueName;
    let claim = this.closed
      ? undefined
      : this.claimWith(
          firstQueue,
          batch.filter((item) => item.queueName === firstQueue).map((item) => item.outcome),
        );
    while (!this.closed) {
      try {
        const outcomes = batch.map((item) => item.outcome);
        const { recorded, claimedJson } = await this.store.recordOutcomes(
          this.config.executorId,
          outcomes,
          wake,
          claim,
        );
        claim?.deliver(claimedJson);
        this.failures.succeeded();
        return new Set(recorded);
      } catch (error) {
        claim?.deliver(undefined, error);
        claim = undefined;
        this.failures.failed(`Recording ${batch.length} workflow outcome(s)`, error);
        await new Promise((resolve) => setTimeout(resolve, RETRY_DELAY_MS));
      }
    }
    return new Set();
  }
}
