import { Injectable } from '@nestjs/common';
import { DuplicateDeliveries } from './duplicate-deliveries';
import { DedupQueueConfig, hasGlobalLimits } from '../dedup-queue.config';
import type { AttachedClaim } from '../database/workflows/claim/workflow-claimer';
import { type WorkflowOutcome, WorkflowOutcomeStore } from '../database/workflows/finish/workflow-outcomes.store';
import { QueueSettings } from '../queue-settings';
import { FailureLog } from '../utils/failure-log';
import { ModuleLogger } from '../utils/module-logger';

const MAX_BATCH = 500;
/**
 * Writes in flight at once per lane: one being answered while the next records what finished meanwhile. On one
 * server all queues share one lane; on Citus each queue has its own (see the class doc).
 */
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
 * On Citus a batch holds one queue's outcomes and each queue has its own writes in flight, so that the retries of a
 * queue whose node is down never hold back the outcomes of queues on other nodes.
 */
@Injectable()
export class OutcomeWriter {
  private readonly logger = new ModuleLogger('DedupQueueScheduler');
  private queued: QueuedOutcome[] = [];
  /** The writes in flight, each with its lane (its queue on Citus, '' on one server). */
  private readonly inFlight = new Map<Promise<void>, string>();
  private sendScheduled = false;
  private closed = false;
  private claimWith: ClaimWithOutcomesHook = () => undefined;
  private readonly failures = new FailureLog(this.logger);
  private readonly deliveryFailures = new FailureLog(this.logger);

  constructor(
    private readonly store: WorkflowOutcomeStore,
    private readonly config: DedupQueueConfig,
    private readonly settings: QueueSettings,
    private readonly duplicates: DuplicateDeliveries,
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
      await (this.inFlight.size > 0
        ? Promise.all(this.inFlight.keys())
        : new Promise((resolve) => setImmediate(resolve)));
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
    for (let batch = this.nextBatch(); batch; batch = this.nextBatch()) {
      const items = batch.items;
      const writing: Promise<void> = this.writeWithRetry(items)
        .then((recorded) => {
          for (const item of items) item.settle(recorded.has(item.outcome.workflowId));
        })
        .finally(() => {
          this.inFlight.delete(writing);
          this.sendSoon();
        });
      this.inFlight.set(writing, batch.lane);
    }
  }

  /** Takes from the queue the next batch: up to `MAX_BATCH` outcomes of the first lane with room for a write. */
  private nextBatch(): { lane: string; items: QueuedOutcome[] } | undefined {
    const busy = new Map<string, number>();
    for (const lane of this.inFlight.values()) busy.set(lane, (busy.get(lane) ?? 0) + 1);
    const first = this.queued.find((item) => (busy.get(this.laneOf(item)) ?? 0) < MAX_IN_FLIGHT);
    if (!first) return undefined;
    const lane = this.laneOf(first);
    const items: QueuedOutcome[] = [];
    const rest: QueuedOutcome[] = [];
    for (const item of this.queued) (items.length < MAX_BATCH && this.laneOf(item) === lane ? items : rest).push(item);
    this.queued = rest;
    return { lane, items };
  }

  private laneOf(item: QueuedOutcome): string {
    return this.config.distribution === 'citus' ? item.queueName : '';
  }

  /** The queues of workflows that ended with messages sent to them deliver what they left unreceived. */
  private deliverStranded(batch: QueuedOutcome[], sentMessages: string[]): void {
    if (sentMessages.length === 0) return;
    const ended = new Set(sentMessages);
    const queues = new Set(batch.filter((item) => ended.has(item.outcome.workflowId)).map((item) => item.queueName));
    for (const queueName of queues) {
      this.duplicates
        .deliver(queueName)
        .catch((error: unknown) =>
          this.failures.failed(`Delivering the unreceived duplicates of "${queueName}"`, error),
        );
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
        const { recorded, claimedJson, sentMessages } = await this.store.recordOutcomes(
          this.config.executorId,
          outcomes,
          wake,
          claim,
        );
        claim?.deliver(claimedJson);
        this.failures.succeeded();
        this.deliverStranded(batch, sentMessages);
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
