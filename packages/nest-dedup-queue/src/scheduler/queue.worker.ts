import { Logger } from '@nestjs/common';
import { hasGlobalLimits } from '../dedup-queue.config';
import type { StepStore } from '../database/step.store';
import type { ClaimedWorkflow, WorkflowClaimer } from '../database/workflow-claimer';
import type { WorkflowOutcome, WorkflowStore } from '../database/workflow.store';
import type { RegisteredWorkflow, WorkflowRegistry } from '../discovery/workflow.registry';
import { WorkflowDeterminismError } from '../errors/workflow-determinism.error';
import { InterruptReason, WorkflowInterruptedError } from '../errors/workflow-interrupted.error';
import { WorkflowExecution } from '../execution/workflow-execution';
import { type WorkflowLifecycle, runOutcomeEvent } from '../observability/workflow-lifecycle.events';
import type { RunTrace, WorkflowTracer } from '../observability/workflow.tracer';
import { backoffDelayMs } from '../utils/backoff';
import { toErrorInfo } from '../utils/error-info';
import { toStoredJson } from '../utils/stored-json';
import type { QueueSettings } from '../queue-settings';
import type { WorkflowCompletions } from '../workflow-completions';
import type { OutcomeWriter } from './outcome.writer';

/** After a failed claim (a lock timeout, a lost connection), back off and try again. */
const CLAIM_BACKOFF = { initialDelayMs: 100, maxDelayMs: 5000 };

export interface QueueWorkerDependencies {
  store: WorkflowStore;
  claimer: WorkflowClaimer;
  settings: QueueSettings;
  steps: StepStore;
  registry: WorkflowRegistry;
  outcomes: OutcomeWriter;
  completions: WorkflowCompletions;
  executorId: string;
  lifecycle: WorkflowLifecycle;
  tracer: WorkflowTracer;
}

interface RunningWorkflow {
  done: Promise<void>;
  controller: AbortController;
}

/**
 * Drains one queue in this process: claims as many workflows as it has free slots (`workerConcurrency`, and the
 * queue's global `concurrency` as counted in Postgres), runs each on its provider with its recorded steps, records
 * the outcome (or schedules a retry), and claims again when a slot frees or a wake-up arrives. At most one claim is
 * in flight per queue and process.
 */
export class QueueWorker {
  private readonly logger = new Logger('DedupQueueScheduler');
  private readonly running = new Map<string, RunningWorkflow>();
  private claiming?: Promise<void>;
  private claimAgain = false;
  /** False once an unconstrained claim came back short and nothing announced new work since. */
  private mayHaveWork = true;
  private stopped = false;
  private retryTimer?: NodeJS.Timeout;
  private failedClaims = 0;

  constructor(
    private readonly queueName: string,
    private readonly deps: QueueWorkerDependencies,
  ) {}

  /**
   * Asks the worker to look for work now (new work was announced, or a timer fired). Cheap to call often:
   * concurrent wake-ups fold into one claim.
   */
  wake(): void {
    this.mayHaveWork = true;
    this.claimSoon();
  }

  private claimSoon(): void {
    if (this.stopped || !this.mayHaveWork) return;
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

  /** Aborts the signal of a workflow running here, if it is. */
  interrupt(workflowId: string, reason: InterruptReason): void {
    this.running.get(workflowId)?.controller.abort(new WorkflowInterruptedError(workflowId, reason));
  }

  interruptAll(reason: InterruptReason): void {
    for (const workflowId of this.running.keys()) this.interrupt(workflowId, reason);
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
      while (this.running.size > 0) await Promise.all([...this.running.values()].map((run) => run.done));
      return true as const;
    })();
    try {
      return await Promise.race([finished, timedOut]);
    } finally {
      clearTimeout(timer);
    }
  }

  runningIds(): string[] {
    return [...this.running.keys()];
  }

  get runningCount(): number {
    return this.running.size;
  }

  private async claimLoop(): Promise<void> {
    try {
      do {
        this.claimAgain = false;
        const queue = this.deps.settings.effective(this.queueName);
        const free = queue.workerConcurrency - this.running.size;
        if (free <= 0 || queue.paused) break;
        const { workflows, retryInMs } = await this.deps.claimer.claim({
          queue,
          executorId: this.deps.executorId,
          limit: free,
          workflowNames: this.deps.registry.names(),
        });
        this.failedClaims = 0;
        for (const workflow of workflows) this.start(workflow);
        if (retryInMs !== undefined) this.wakeLater(retryInMs);
        else if (workflows.length === free) this.claimAgain = true;
        else if (!hasGlobalLimits(queue)) this.mayHaveWork = this.claimAgain;
      } while (this.claimAgain && !this.stopped);
    } catch (error) {
      this.failedClaims += 1;
      const delay = backoffDelayMs(this.failedClaims, CLAIM_BACKOFF);
      this.logger.error(`Claiming from queue "${this.queueName}" failed, retrying in ${delay} ms: ${(error as Error).message}`);
      this.wakeLater(delay);
    }
  }

  private wakeLater(delayMs: number): void {
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.wake(), delayMs);
    this.retryTimer.unref();
  }

  private start(claimed: ClaimedWorkflow): void {
    const controller = new AbortController();
    const done: Promise<void> = this.execute(claimed, controller).finally(() => {
      // NOTE: a resumed workflow may be running again here while its interrupted earlier run winds down.
      if (this.running.get(claimed.workflowId)?.done === done) this.running.delete(claimed.workflowId);
      this.deps.completions.finished(claimed.workflowId);
      this.claimSoon();
    });
    this.running.set(claimed.workflowId, { done, controller });
  }

  private async execute(claimed: ClaimedWorkflow, controller: AbortController): Promise<void> {
    const timeout = claimed.remainingMs === null ? undefined : setTimeout(() => void this.timeOut(claimed.workflowId), Math.max(0, claimed.remainingMs));
    const ref = { workflowId: claimed.workflowId, queueName: this.queueName, workflowName: claimed.workflowName };
    this.deps.lifecycle.emit({ event: 'started', ...ref, attempt: claimed.attempts, waitSeconds: claimed.waitSeconds });
    const startedAt = performance.now();
    try {
      const workflow = this.deps.registry.find(claimed.workflowName);
      const outcome = await this.deps.tracer.process(this.queueName, claimed, async (trace) =>
        workflow
          ? this.run(claimed, workflow, controller, trace)
          : this.failure(claimed, new Error(`Workflow "${claimed.workflowName}" is not registered in this process`)),
      );
      const durationMs = performance.now() - startedAt;
      if (controller.signal.aborted) return;
      if (outcome.status === 'ERROR') {
        this.logger.warn(`Workflow ${claimed.workflowName} (${claimed.workflowId}) failed: ${outcome.error?.message}`);
      }
      if (await this.deps.outcomes.write(outcome, this.queueName)) {
        this.deps.lifecycle.emit(runOutcomeEvent(ref, claimed.attempts, outcome, durationMs));
      }
      if (outcome.retryDelayMs !== undefined) setTimeout(() => this.wake(), outcome.retryDelayMs).unref();
    } finally {
      clearTimeout(timeout);
    }
  }

  private async run(
    claimed: ClaimedWorkflow,
    workflow: RegisteredWorkflow,
    controller: AbortController,
    trace: RunTrace,
  ): Promise<WorkflowOutcome> {
    const workflowId = claimed.workflowId;
    try {
      const recorded = claimed.attempts > 1 ? await this.deps.steps.load(workflowId) : new Map();
      const execution = new WorkflowExecution(
        { workflowId, workflowName: claimed.workflowName, queueName: this.queueName, attempt: claimed.attempts, signal: controller.signal },
        this.deps.executorId,
        recorded,
        this.deps.steps,
        (reason) => this.interrupt(workflowId, reason),
        trace,
      );
      const result = await execution.run(() => workflow.run(JSON.parse(claimed.inputsJson) as unknown[]));
      const outputJson = result === undefined ? null : toStoredJson(result, 'The result');
      return { workflowId, status: 'SUCCESS', outputJson, error: null };
    } catch (thrown) {
      const retryable = !(thrown instanceof WorkflowDeterminismError) && claimed.failedAttempts + 1 < claimed.maxAttempts;
      if (retryable) {
        const delay = backoffDelayMs(claimed.failedAttempts + 1, workflow.options.backoff);
        return { ...this.failure(claimed, thrown), status: 'RETRY', retryDelayMs: delay };
      }
      return this.failure(claimed, thrown);
    }
  }

  private failure(claimed: ClaimedWorkflow, thrown: unknown): WorkflowOutcome {
    return { workflowId: claimed.workflowId, status: 'ERROR', outputJson: null, error: toErrorInfo(thrown) };
  }

  private async timeOut(workflowId: string): Promise<void> {
    this.interrupt(workflowId, 'timed-out');
    try {
      const { cancelled } = (await this.deps.store.cancel(workflowId, 'timed-out')) ?? {};
      if (cancelled) this.deps.lifecycle.emit({ event: 'cancelled', ...cancelled, reason: 'timed-out' });
    } catch (error) {
      const message = (error as Error).message;
      this.logger.warn(`Cancelling timed-out workflow ${workflowId} failed (the next heartbeat retries): ${message}`);
    }
  }
}
