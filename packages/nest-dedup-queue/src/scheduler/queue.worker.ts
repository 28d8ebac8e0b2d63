import { Logger } from '@nestjs/common';
import type { ResolvedQueue } from '../dedup-queue.config';
import type { ClaimedWorkflow, WorkflowOutcome, WorkflowStore } from '../database/workflow.store';
import type { WorkflowRegistry } from '../discovery/workflow.registry';
import { toErrorInfo } from '../utils/error-info';
import { toStoredJson } from '../utils/stored-json';
import type { WorkflowCompletions } from '../workflow-completions';
import type { OutcomeWriter } from './outcome.writer';

const CLAIM_RETRY_DELAY_MS = 1000;

export interface QueueWorkerDependencies {
  store: WorkflowStore;
  registry: WorkflowRegistry;
  outcomes: OutcomeWriter;
  completions: WorkflowCompletions;
  executorId: string;
}

/**
 * Drains one queue in this process: claims as many workflows as it has free slots (`workerConcurrency`, and the
 * queue's global `concurrency` as counted in Postgres), runs each on its provider, records the outcome, and claims
 * again when a slot frees or a wake-up arrives. At most one claim is in flight per queue and process.
 */
export class QueueWorker {
  private readonly logger = new Logger('DedupQueueScheduler');
  private readonly running = new Set<Promise<void>>();
  private claiming?: Promise<void>;
  private claimAgain = false;
  private stopped = false;
  private retryTimer?: NodeJS.Timeout;

  constructor(
    private readonly queue: ResolvedQueue,
    private readonly deps: QueueWorkerDependencies,
  ) {}

  /** Asks the worker to look for work now. Cheap to call often: concurrent wake-ups fold into one claim. */
  wake(): void {
    if (this.stopped) return;
    if (this.claiming) {
      this.claimAgain = true;
      return;
    }
    this.claiming = this.claimLoop().finally(() => (this.claiming = undefined));
  }

  /** Stops claiming; running workflows go on. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.retryTimer);
  }

  /**
   * Resolves when the claim in flight (whose workflows must run: they are already PENDING under this executor) and
   * every running workflow have finished and their outcomes are written, or after `timeoutMs`.
   */
  async waitForRunning(timeoutMs: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    const finished = (async () => {
      await this.claiming;
      while (this.running.size > 0) await Promise.all([...this.running]);
      return true as const;
    })();
    try {
      return await Promise.race([finished, timedOut]);
    } finally {
      clearTimeout(timer);
    }
  }

  get runningCount(): number {
    return this.running.size;
  }

  private async claimLoop(): Promise<void> {
    try {
      do {
        this.claimAgain = false;
        const free = this.queue.workerConcurrency - this.running.size;
        if (free <= 0) break;
        const claimed = await this.deps.store.claim({
          queueName: this.queue.name,
          executorId: this.deps.executorId,
          limit: free,
          workflowNames: this.deps.registry.names(),
          globalConcurrency: this.queue.concurrency,
        });
        for (const workflow of claimed) this.start(workflow);
        if (claimed.length === free) this.claimAgain = true;
      } while (this.claimAgain && !this.stopped);
    } catch (error) {
      this.logger.error(`Claiming from queue "${this.queue.name}" failed: ${(error as Error).message}`);
      clearTimeout(this.retryTimer);
      this.retryTimer = setTimeout(() => this.wake(), CLAIM_RETRY_DELAY_MS);
      this.retryTimer.unref();
    }
  }

  private start(claimed: ClaimedWorkflow): void {
    const execution = this.execute(claimed).finally(() => {
      this.running.delete(execution);
      this.deps.completions.finished(claimed.workflowId);
      this.wake();
    });
    this.running.add(execution);
  }

  private async execute(claimed: ClaimedWorkflow): Promise<void> {
    const outcome = await this.run(claimed);
    if (outcome.status === 'ERROR') {
      this.logger.warn(`Workflow ${claimed.workflowName} (${claimed.workflowId}) failed: ${outcome.error?.message}`);
    }
    await this.deps.outcomes.write(outcome, this.queue.name);
  }

  private async run(claimed: ClaimedWorkflow): Promise<WorkflowOutcome> {
    const workflowId = claimed.workflowId;
    try {
      const workflow = this.deps.registry.find(claimed.workflowName);
      if (!workflow) throw new Error(`Workflow "${claimed.workflowName}" is not registered in this process`);
      const result = await workflow.run(JSON.parse(claimed.inputsJson) as unknown[]);
      const outputJson = result === undefined ? null : toStoredJson(result, 'The result');
      return { workflowId, status: 'SUCCESS', outputJson, error: null };
    } catch (thrown) {
      return { workflowId, status: 'ERROR', outputJson: null, error: toErrorInfo(thrown) };
    }
  }
}
