import { Logger } from '@nestjs/common';
import { hasGlobalLimits } from '../dedup-queue.config';
import type { StepStore } from '../database/step.store';
import { type ClaimedWorkflow, type WorkflowClaimer, claimedRows } from '../database/workflow-claimer';
import type { WorkflowOutcome, WorkflowStore } from '../database/workflow.store';
import type { RegisteredWorkflow, WorkflowRegistry, WorkflowRunOptions } from '../discovery/workflow.registry';
import { describeError } from '../database/connection-monitor';
import { DatabaseUnavailableError } from '../errors/database-unavailable.error';
import { WorkflowDeterminismError } from '../errors/workflow-determinism.error';
import { InterruptReason, WorkflowInterruptedError } from '../errors/workflow-interrupted.error';
import { WorkflowExecution } from '../execution/workflow-execution';
import { type WorkflowLifecycle, runOutcomeEvent } from '../observability/workflow-lifecycle.events';
import type { RunTrace, WorkflowTracer } from '../observability/workflow.tracer';
import { backoffDelayMs } from '../utils/backoff';
import { FailureLog } from '../utils/failure-log';
import { toErrorInfo } from '../utils/error-info';
import { toStoredJson } from '../utils/stored-json';
import type { AbandonedRunInfo } from '../interfaces/abandoned-run.interface';
import type { QueueSettings } from '../queue-settings';
import type { WorkflowCompletions } from '../workflow-completions';
import type { ClaimWithOutcomes, OutcomeWriter } from './outcome.writer';

/** After a failed claim (a lock timeout, a lost connection), back off and try again. */
const CLAIM_BACKOFF = { initialDelayMs: 100, maxDelayMs: 5000 };
/** A cancelled body still running this long after its slot was freed is reported as abandoned. */
const ABANDONED_WARNING_AFTER_MS = 1000;
/** Later reminders that an abandoned body still runs: at 1 minute, then each time its age doubles, at least hourly. */
const ABANDONED_REMINDER = { firstMs: 60_000, maxIntervalMs: 3_600_000 };

export interface QueueWorkerDependencies {
  store: WorkflowStore;
  claimer: WorkflowClaimer;
  settings: QueueSettings;
  steps: StepStore;
  registry: WorkflowRegistry;
  outcomes: OutcomeWriter;
  completions: WorkflowCompletions;
  executorId: string;
  /** False while the scheduler reconciles after a claim whose answer was lost. */
  claimsAllowed(): boolean;
  /** A claim failed with the connection: it may have taken workflows this process never heard of. */
  claimMayHaveBeenLost(): void;
  lifecycle: WorkflowLifecycle;
  tracer: WorkflowTracer;
}

/** One run of one workflow in this process: `attempt` is its claim number, which no later run shares. */
interface RunningWorkflow {
  workflowId: string;
  workflowName: string;
  attempt: number;
  controller: AbortController;
  done: Promise<void>;
  /** Resolves when the run no longer holds a slot: it returned, or it was abandoned. */
  freed: Promise<void>;
  free: () => void;
}

interface AbandonedRun {
  run: RunningWorkflow;
  reason: 'cancelled' | 'timed-out';
  abandonedAt: number;
  warned: boolean;
  reminder?: NodeJS.Timeout;
}

/**
 * Drains one queue in this process: claims as many workflows as it has free slots (`workerConcurrency`, and the
 * queue's global `concurrency` as counted in Postgres), runs each on its provider with its recorded steps, records
 * the outcome (or schedules a retry), and claims again when a slot frees or a wake-up arrives. In a queue without
 * global limits, the claim for the slots that recorded outcomes free is made in the statement that records them. At
 * most one claim is in flight per queue and process.
 */
export class QueueWorker {
  private readonly logger = new Logger('DedupQueueScheduler');
  private readonly running = new Map<string, RunningWorkflow>();
  private readonly abandoned = new Map<RunningWorkflow, AbandonedRun>();
  private claiming?: Promise<void>;
  private claimAgain = false;
  /** False once an unconstrained claim came back short and nothing announced new work since. */
  private mayHaveWork = true;
  private stopped = false;
  private retryTimer?: NodeJS.Timeout;
  private failedClaims = 0;
  private readonly claimFailures = new FailureLog(this.logger);

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
    const run = this.running.get(workflowId);
    if (run) abort(run, reason);
  }

  /**
   * The workflow is CANCELLED in Postgres (cancelled, or timed out): if it runs here, aborts its signal and frees
   * its slot at once. A body that goes on running is abandoned: its outcome is ignored, it is counted in
   * `abandonedRuns()` and reported while it runs. `attempt` is the run the cancel ended; a later run (the workflow
   * was resumed and claimed again meanwhile) is left alone. Elsewhere, a queue with global limits looks for work:
   * the cancelled workflow may have held one of its slots.
   */
  release(workflowId: string, reason: 'cancelled' | 'timed-out', attempt?: number): void {
    const run = this.running.get(workflowId);
    if (run && (attempt === undefined || run.attempt <= attempt)) this.abandon(run, reason);
    else if (hasGlobalLimits(this.deps.settings.effective(this.queueName))) this.wake();
  }

  /** The bodies of cancelled or timed-out workflows that still run in this process, outside any slot. */
  abandonedRuns(): AbandonedRunInfo[] {
    const now = Date.now();
    return [...this.abandoned.values()].map(({ run, reason, abandonedAt }) => ({
      workflowId: run.workflowId,
      queueName: this.queueName,
      workflowName: run.workflowName,
      reason,
      abandonedAt: new Date(abandonedAt),
      abandonedForMs: now - abandonedAt,
    }));
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
      while (this.running.size > 0) await Promise.all([...this.running.values()].map((run) => run.freed));
      return true as const;
    })();
    try {
      return await Promise.race([finished, timedOut]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Resolves when no claim of this worker is in flight. */
  async claimSettled(): Promise<void> {
    while (this.claiming) await this.claiming;
  }

  runningIds(): string[] {
    return [...this.running.keys()];
  }

  get runningCount(): number {
    return this.running.size;
  }

  /**
   * The claim to make in the statement that records `outcomes` of this queue: as many as the slots free once they
   * are recorded. None while a claim is in flight, claims are held or the queue has global limits or is paused.
   */
  claimWithOutcomes(outcomes: WorkflowOutcome[]): ClaimWithOutcomes | undefined {
    if (this.stopped || this.claiming || !this.mayHaveWork || !this.deps.claimsAllowed()) return undefined;
    const queue = this.deps.settings.effective(this.queueName);
    if (queue.paused || hasGlobalLimits(queue)) return undefined;
    const freeing = outcomes.filter((outcome) => this.running.get(outcome.workflowId)?.attempt === outcome.attempt);
    const limit = queue.workerConcurrency - this.running.size + freeing.length;
    if (limit <= 0) return undefined;
    let settle = () => undefined as void;
    this.claiming = new Promise<void>((resolve) => (settle = resolve));
    this.claimAgain = false;
    const request = { queue, executorId: this.deps.executorId, limit, workflowNames: this.deps.registry.names() };
    return {
      ...this.deps.claimer.attachable(request),
      deliver: (claimedJson, error) => {
        this.claiming = undefined;
        settle();
        if (claimedJson) {
          const workflows = claimedRows(claimedJson);
          for (const workflow of workflows) this.start(workflow);
          if (workflows.length < limit) this.mayHaveWork = this.claimAgain;
        } else if (error instanceof DatabaseUnavailableError) {
          this.deps.claimMayHaveBeenLost();
        }
        if (this.claimAgain) this.claimSoon();
      },
    };
  }

  private async claimLoop(): Promise<void> {
    try {
      do {
        this.claimAgain = false;
        const queue = this.deps.settings.effective(this.queueName);
        const free = queue.workerConcurrency - this.running.size;
        if (free <= 0 || queue.paused || !this.deps.claimsAllowed()) break;
        const { workflows, retryInMs } = await this.deps.claimer.claim({
          queue,
          executorId: this.deps.executorId,
          limit: free,
          workflowNames: this.deps.registry.names(),
        });
        this.failedClaims = 0;
        this.claimFailures.succeeded();
        for (const workflow of workflows) this.start(workflow);
        if (retryInMs !== undefined) this.wakeLater(retryInMs);
        else if (workflows.length === free) this.claimAgain = true;
        else if (!hasGlobalLimits(queue)) this.mayHaveWork = this.claimAgain;
      } while (this.claimAgain && !this.stopped);
    } catch (error) {
      this.failedClaims += 1;
      const delay = backoffDelayMs(this.failedClaims, CLAIM_BACKOFF);
      this.claimFailures.failed(`Claiming from queue "${this.queueName}"`, error);
      if (error instanceof DatabaseUnavailableError) this.deps.claimMayHaveBeenLost();
      this.wakeLater(delay);
    }
  }

  private wakeLater(delayMs: number): void {
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.wake(), delayMs);
    this.retryTimer.unref();
  }

  private start(claimed: ClaimedWorkflow): void {
    // NOTE: claimed again while an earlier run still holds its slot: it was cancelled and resumed before the cancel
    // reached this process. That run can no longer write (outcomes and steps are fenced by attempt), so it goes.
    const earlier = this.running.get(claimed.workflowId);
    if (earlier) this.abandon(earlier, 'cancelled');
    let free = () => undefined as void;
    const freed = new Promise<void>((resolve) => (free = resolve));
    const run: RunningWorkflow = {
      workflowId: claimed.workflowId,
      workflowName: claimed.workflowName,
      attempt: claimed.attempts,
      controller: new AbortController(),
      done: Promise.resolve(),
      freed,
      free,
    };
    this.running.set(run.workflowId, run);
    run.done = this.execute(claimed, run).finally(() => this.finished(run));
  }

  private finished(run: RunningWorkflow): void {
    if (this.running.get(run.workflowId) === run) this.running.delete(run.workflowId);
    run.free();
    const abandoned = this.abandoned.get(run);
    if (abandoned) {
      this.abandoned.delete(run);
      clearTimeout(abandoned.reminder);
      if (abandoned.warned) {
        const age = seconds(Date.now() - abandoned.abandonedAt);
        this.logger.log(`The abandoned body of workflow ${describe(run)} returned after ${age}`);
      }
    }
    this.deps.completions.finished(run.workflowId);
    this.claimSoon();
  }

  private abandon(run: RunningWorkflow, reason: 'cancelled' | 'timed-out'): void {
    abort(run, reason);
    this.running.delete(run.workflowId);
    run.free();
    const abandoned: AbandonedRun = { run, reason, abandonedAt: Date.now(), warned: false };
    this.abandoned.set(run, abandoned);
    this.remindLater(abandoned, ABANDONED_WARNING_AFTER_MS);
    this.claimSoon();
  }

  private remindLater(abandoned: AbandonedRun, delayMs: number): void {
    abandoned.reminder = setTimeout(() => this.remind(abandoned), delayMs);
    abandoned.reminder.unref();
  }

  private remind(abandoned: AbandonedRun): void {
    const ageMs = Date.now() - abandoned.abandonedAt;
    const what = abandoned.reason === 'timed-out' ? 'timed out' : 'was cancelled';
    this.logger.warn(
      abandoned.warned
        ? `The abandoned body of workflow ${describe(abandoned.run)} is still running, ${seconds(ageMs)} after ` +
            `it ${what}`
        : `Workflow ${describe(abandoned.run)} ${what} but its body ignores its signal and is still running after ` +
            `${seconds(ageMs)}; its slot is freed and its outcome will be ignored (abandoned)`,
    );
    abandoned.warned = true;
    const { firstMs, maxIntervalMs } = ABANDONED_REMINDER;
    const next = ageMs < firstMs ? firstMs : Math.min(ageMs * 2, ageMs + maxIntervalMs);
    this.remindLater(abandoned, next - ageMs);
  }

  private async execute(claimed: ClaimedWorkflow, run: RunningWorkflow): Promise<void> {
    const { controller } = run;
    const remainingMs = claimed.remainingMs;
    const timeout =
      remainingMs === null ? undefined : setTimeout(() => void this.timeOut(run), Math.max(0, remainingMs));
    const ref = { workflowId: claimed.workflowId, queueName: this.queueName, workflowName: claimed.workflowName };
    this.deps.lifecycle.emit({ event: 'started', ...ref, attempt: claimed.attempts, waitSeconds: claimed.waitSeconds });
    const startedAt = performance.now();
    try {
      const workflow = this.deps.registry.find(claimed.workflowName);
      const outcome = await this.deps.tracer.process(this.queueName, claimed, async (trace) =>
        workflow
          ? this.run(claimed, workflow, run, trace)
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
    run: RunningWorkflow,
    trace: RunTrace,
  ): Promise<WorkflowOutcome> {
    const workflowId = claimed.workflowId;
    const own = this.deps.registry.runOptions(claimed.workflowName);
    await this.recordRunOptions(claimed, own);
    try {
      const recorded = claimed.attempts > 1 ? await this.deps.steps.load(workflowId) : new Map();
      const execution = new WorkflowExecution(
        {
          workflowId,
          workflowName: claimed.workflowName,
          queueName: this.queueName,
          attempt: claimed.attempts,
          signal: run.controller.signal,
        },
        this.deps.executorId,
        recorded,
        this.deps.steps,
        (reason) => abort(run, reason),
        trace,
      );
      const result = await execution.run(() => workflow.run(JSON.parse(claimed.inputsJson) as unknown[]));
      const outputJson = result === undefined ? null : toStoredJson(result, 'The result');
      return { workflowId, attempt: claimed.attempts, status: 'SUCCESS', outputJson, error: null };
    } catch (thrown) {
      const retryable = !(thrown instanceof WorkflowDeterminismError) && claimed.failedAttempts + 1 < own.maxAttempts;
      if (retryable) {
        const delay = backoffDelayMs(claimed.failedAttempts + 1, own.backoff);
        return { ...this.failure(claimed, thrown), status: 'RETRY', retryDelayMs: delay };
      }
      return this.failure(claimed, thrown);
    }
  }

  /**
   * This process's options decide how the workflow retries and when it is dead-lettered, whatever the enqueuing
   * process stored (it may not have the workflow, or have other options); the row is corrected when they differ.
   */
  private async recordRunOptions(claimed: ClaimedWorkflow, own: WorkflowRunOptions): Promise<void> {
    if (claimed.maxAttempts === own.maxAttempts && claimed.maxRecoveryAttempts === own.maxRecoveryAttempts) return;
    try {
      await this.deps.store.recordRunOptions(claimed.workflowId, claimed.attempts, own);
    } catch (error) {
      this.logger.warn(`Recording the options of workflow ${claimed.workflowId} failed: ${describeError(error)}`);
    }
  }

  private failure(claimed: ClaimedWorkflow, thrown: unknown): WorkflowOutcome {
    const { workflowId, attempts: attempt } = claimed;
    return { workflowId, attempt, status: 'ERROR', outputJson: null, error: toErrorInfo(thrown) };
  }

  /**
   * Aborts the run at its deadline, then frees its slot once Postgres has it CANCELLED (so global counts agree).
   * An abandoned run's deadline no longer counts: its workflow may run again, resumed, with a deadline of its own.
   */
  private async timeOut(run: RunningWorkflow): Promise<void> {
    if (this.running.get(run.workflowId) !== run) return;
    abort(run, 'timed-out');
    try {
      const cancelled = await this.deps.store.cancel(run.workflowId, 'timed-out');
      if (cancelled?.cancelled)
        this.deps.lifecycle.emit({ event: 'cancelled', ...cancelled.cancelled, reason: 'timed-out' });
      if (cancelled?.status === 'CANCELLED') this.release(run.workflowId, 'timed-out', run.attempt);
    } catch (error) {
      if (error instanceof DatabaseUnavailableError) return;
      this.logger.warn(
        `Cancelling timed-out workflow ${run.workflowId} failed (the next sweep retries): ${describeError(error)}`,
      );
    }
  }
}

/** Aborts a run's signal; the first reason stays. */
function abort(run: RunningWorkflow, reason: InterruptReason): void {
  run.controller.abort(new WorkflowInterruptedError(run.workflowId, reason));
}

function describe(run: RunningWorkflow): string {
  return `${run.workflowName} (${run.workflowId})`;
}

function seconds(ms: number): string {
  return ms < 60_000 ? `${Math.round(ms / 1000)} s` : `${Math.round(ms / 60_000)} min`;
}
