import { Injectable, Logger } from '@nestjs/common';
import { DedupQueueConfig, hasGlobalLimits } from '../dedup-queue.config';
import type { AttachedClaim } from '../database/workflow-claimer';
import { type WorkflowOutcome, WorkflowStore } from '../database/workflow.store';
import { QueueSettings } from '../queue-settings';
import { FailureLog } from '../utils/failure-log';

const MAX_BATCH = 500;
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
 * Records workflow outcomes, combining those that finish while a write is in flight into one statement
 * (group commit): one round trip for many completions, no added delay for a lone one. The worker of the batch's
 * first queue may attach its next claim to the statement (`attachClaims`), so that finishing and claiming take one round
 * trip and one commit. A failed write is retried
 * until it succeeds or the writer is closed; an unwritten outcome leaves its workflow PENDING (to be recovered),
 * never marked done. A queue with global limits has its workers woken everywhere by the write (a freed slot there
 * may let another process start work).
 */
@Injectable()
export class OutcomeWriter {
  private readonly logger = new Logger('DedupQueueScheduler');
  private queued: QueuedOutcome[] = [];
  private flushing?: Promise<void>;
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
      this.flushing ??= this.flush().finally(() => (this.flushing = undefined));
    });
  }

  /** Waits until everything queued so far has been written. */
  async drained(): Promise<void> {
    while (this.flushing) await this.flushing;
  }

  /** Stops retrying failed writes; what is still unwritten settles as not recorded. */
  close(): void {
    this.closed = true;
  }

  private async flush(): Promise<void> {
    while (this.queued.length > 0) {
      const batch = this.queued.splice(0, MAX_BATCH);
      const recorded = await this.writeWithRetry(batch);
      for (const item of batch) item.settle(recorded.has(item.outcome.workflowId));
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
