import { type ResolvedQueue, hasGlobalLimits } from '../dedup-queue.config';
import type { StepStore } from '../database/step.store';
import type { ClaimedWorkflow, WorkflowClaimer } from '../database/workflow-claimer';
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
import { SUSPENDED, type WorkflowWaits } from '../composition/workflow-waits';
import { ModuleLogger } from '../utils/module-logger';

/** After a failed claim (a lock timeout, a lost connection), back off and try again. */
const CLAIM_BACKOFF = { initialDelayMs: 100, maxDelayMs: 5000 };
/** A cancelled body still running this long after its slot was freed is reported as abandoned. */
const ABANDONED_WARNING_AFTER_MS = 1000;
/** Later reminders that an abandoned body still runs: at 1 minute, then each time its age doubles, at least hourly. */
const ABANDONED_REMINDER = { firstMs: 60_000, maxIntervalMs: 3_600_000 };
/** A queue's workflows are quick while their bodies take less than this, on average (see `QueueWorker`). */
const QUICK_BODY_MS = 10;
/** A buffered workflow not started within this long is put back in its queue, for any process to take. */
const BUFFER_HOLD_MS = 250;

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
  /** Durable waits (`sleep`, `recv`): a run they suspend ends without an outcome, its workflow WAITING. */
  waits: WorkflowWaits;
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
  /** Set once the body was suspended in a durable wait: the run ends, and nothing is recorded. */
  suspended?: boolean;
}

/** Claimed ahead of a free slot: PENDING under this executor, started in claim order as slots free. */
interface BufferedWorkflow {
  workflow: ClaimedWorkflow;
  bufferedAt: number;
}

interface AbandonedRun {
  run: RunningWorkflow;
  reason: 'cancelled' | 'timed-out';
  abandonedAt: number;
  warned: boolean;
  reminder?: NodeJS.Timeout;
}

/**
 * Drains one queue in this process: claim, run, record. It claims when woken (work was announced, a timer fired)
 * and after each recorded outcome, runs each claimed workflow in one of `workerConcurrency` slots with its recorded
 * steps, and records its outcome (or schedules a retry); in a queue without global limits the next claim rides in
 * the statement that records outcomes. A slot frees once its outcome is recorded, so the executor's PENDING rows
 * are at most `workerConcurrency`, with one exception: while a queue without global limits is quick (its bodies
 * average under `QUICK_BODY_MS`), a slot frees as soon as the body returns (the outcome is written meanwhile), and
 * a claim riding in an outcome write asks for up to `workerConcurrency` more than the free slots, into a local
 * buffer started in claim order as slots free, so that the next workflows are already here while the write is in
 * the database. Claims in flight count against the room. A buffered workflow not started within `BUFFER_HOLD_MS`,
 * or still buffered at shutdown or when its queue's pause reaches this process, is given back to its queue.
 */
export class QueueWorker {
  private readonly logger = new ModuleLogger('DedupQueueScheduler');
  private readonly running = new Map<string, RunningWorkflow>();
  /** Runs whose body returned while their outcome is being written: still PENDING here, outside any slot. */
  private readonly recording = new Map<string, RunningWorkflow>();
  private readonly buffered: BufferedWorkflow[] = [];
  private bufferTimer?: NodeJS.Timeout;
  private givingBack: Promise<unknown> = Promise.resolve();
  /** A moving average of how long bodies take, in milliseconds; undefined before the first returns. */
  private bodyMs?: number;
  private readonly abandoned = new Map<RunningWorkflow, AbandonedRun>();
  /** The claims in flight (one of `claimLoop`, and those attached to outcome writes) and what they ask for in all. */
  /**
   * The claims in flight, each with the cancels announced meanwhile for workflows not known here (ID and the run the
   * cancel ended): the claim may have taken them before the cancel, so they are dropped when it returns.
   */
  private readonly claims = new Map<Promise<void>, Map<string, number | undefined>>();
  private claimingLimit = 0;
  private claimLoopRun?: Promise<void>;
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
    this.startBuffered();
    this.claimSoon();
  }

  private claimSoon(): void {
    if (this.stopped || !this.mayHaveWork) return;
    if (this.claimLoopRun) {
      this.claimAgain = true;
      return;
    }
    this.claimLoopRun = this.claimLoop().finally(() => (this.claimLoopRun = undefined));
  }

  /** Stops claiming and gives back the buffered workflows; running workflows go on. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    clearTimeout(this.bufferTimer);
    this.giveBack(this.buffered.splice(0));
  }

  /** Aborts the signal of a workflow running here, if it is; a buffered one is dropped (it is no longer ours). */
  interrupt(workflowId: string, reason: InterruptReason): void {
    const run = this.running.get(workflowId);
    if (run) abort(run, reason);
    this.dropBuffered(workflowId);
  }

  /**
   * The workflow is CANCELLED in Postgres (cancelled, or timed out): if it runs here, aborts its signal and frees
   * its slot at once. A body that goes on running is abandoned: its outcome is ignored, it is counted in
   * `abandonedRuns()` and reported while it runs. `attempt` is the run the cancel ended; a later run (the workflow
   * was resumed and claimed again meanwhile) is left alone. A claim in flight may have taken it before the cancel: it
   * is dropped when the claim returns. Elsewhere, a queue with global limits looks for work: the cancelled workflow
   * may have held one of its slots.
   */
  release(workflowId: string, reason: 'cancelled' | 'timed-out', attempt?: number): void {
    const run = this.running.get(workflowId);
    if (run && (attempt === undefined || run.attempt <= attempt)) {
      this.abandon(run, reason);
      return;
    }
    if (this.dropBuffered(workflowId, attempt)) return;
    for (const cancelled of this.claims.values()) cancelled.set(workflowId, attempt);
    this.endedElsewhere();
  }

  /** Whether this worker may hold the workflow: runs it, buffers it, or has a claim in flight that may take it. */
  mayHold(workflowId: string): boolean {
    return (
      this.running.has(workflowId) ||
      this.claims.size > 0 ||
      this.buffered.some(({ workflow }) => workflow.workflowId === workflowId)
    );
  }

  /** A workflow not held here ended: a queue with global limits looks for work, since it may have held a slot. */
  endedElsewhere(): void {
    if (hasGlobalLimits(this.deps.settings.effective(this.queueName))) this.wake();
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
   * Resolves when the claim in flight (whose workflows must run or be given back: they are already PENDING under
   * this executor) and every running workflow have finished and their outcomes are written, or after `timeoutMs`.
   */
  async waitForRunning(timeoutMs: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    const finished = (async () => {
      await this.claimSettled();
      while (this.running.size > 0 || this.recording.size > 0) {
        await Promise.all([
          ...[...this.running.values()].map((run) => run.freed),
          ...[...this.recording.values()].map((run) => run.done),
        ]);
      }
      await this.givingBack;
      return true as const;
    })();
    try {
      return await Promise.race([finished, timedOut]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Resolves when no claim of this worker is in flight (and what the last one claimed has started or is buffered). */
  async claimSettled(): Promise<void> {
    while (this.claims.size > 0 || this.claimLoopRun) await Promise.all([...this.claims.keys(), this.claimLoopRun]);
  }

  /** The workflows PENDING under this executor that this worker knows: running, being recorded, or buffered. */
  runningIds(): string[] {
    const buffered = this.buffered.map(({ workflow }) => workflow.workflowId);
    return [...new Set([...this.running.keys(), ...this.recording.keys(), ...buffered])];
  }

  get runningCount(): number {
    return this.running.size;
  }

  /**
   * The claim to make in the statement that records `outcomes` of this queue: as many as `claimRoom`, counting the
   * slots that recording them frees, and claiming ahead while the queue is quick. None while claims are held or the
   * queue has global limits or is paused.
   */
  claimWithOutcomes(outcomes: WorkflowOutcome[]): ClaimWithOutcomes | undefined {
    if (this.stopped || !this.mayHaveWork || !this.deps.claimsAllowed()) return undefined;
    const queue = this.deps.settings.effective(this.queueName);
    if (queue.paused || hasGlobalLimits(queue)) return undefined;
    const freeing = outcomes.filter((outcome) => this.running.get(outcome.workflowId)?.attempt === outcome.attempt);
    const limit = this.claimRoom(queue, freeing.length, this.quick(queue));
    if (limit <= 0) return undefined;
    const claim = this.claimStarted(limit);
    this.claimAgain = false;
    const request = { queue, executorId: this.deps.executorId, limit, claimKeys: this.deps.registry.claimKeys() };
    const attached = this.deps.claimer.attachable(request);
    return {
      ...attached,
      deliver: (claimedJson, error) => {
        claim.settle();
        if (claimedJson) {
          const workflows = attached.read(claimedJson);
          this.take(workflows, claim.cancelled);
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
        const limit = this.claimRoom(queue);
        if (limit <= 0 || queue.paused || !this.deps.claimsAllowed()) break;
        const claim = this.claimStarted(limit);
        const { workflows, retryInMs } = await this.deps.claimer
          .claim({ queue, executorId: this.deps.executorId, limit, claimKeys: this.deps.registry.claimKeys() })
          .finally(claim.settle);
        this.failedClaims = 0;
        this.claimFailures.succeeded();
        this.take(workflows, claim.cancelled);
        if (retryInMs !== undefined) this.wakeLater(retryInMs);
        else if (workflows.length === limit) this.claimAgain = true;
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

  /**
   * How many to claim now (0 or less: none): the free slots (with those `freeing`: outcomes being recorded with this
   * claim), and `workerConcurrency` more when claiming `ahead`, less the buffer and what the claims in flight ask for.
   */
  private claimRoom(queue: ResolvedQueue, freeing = 0, ahead = false): number {
    const capacity = queue.workerConcurrency * (ahead ? 2 : 1);
    return capacity - (this.running.size - freeing) - this.buffered.length - this.claimingLimit;
  }

  /** Whether the queue's bodies are quick (see the class doc): never with global limits, whose counts stay exact. */
  private quick(queue: ResolvedQueue): boolean {
    return !hasGlobalLimits(queue) && this.bodyMs !== undefined && this.bodyMs < QUICK_BODY_MS;
  }

  /** Counts a claim of `limit` as in flight until the returned function is called. */
  private claimStarted(limit: number): { settle: () => void; cancelled: Map<string, number | undefined> } {
    let resolve = () => undefined as void;
    const claim = new Promise<void>((done) => (resolve = done));
    const cancelled = new Map<string, number | undefined>();
    this.claims.set(claim, cancelled);
    this.claimingLimit += limit;
    const settle = () => {
      if (!this.claims.delete(claim)) return;
      this.claimingLimit -= limit;
      resolve();
    };
    return { settle, cancelled };
  }

  /**
   * Starts claimed workflows in free slots and buffers the rest (given back at once when stopped), but for those a
   * cancel ended while their claim was in flight (`cancelled`): they are no longer PENDING, so they are dropped.
   */
  private take(workflows: ClaimedWorkflow[], cancelled: Map<string, number | undefined>): void {
    const bufferedAt = performance.now();
    for (const workflow of workflows) {
      const endedRun = cancelled.get(workflow.workflowId);
      if (cancelled.has(workflow.workflowId) && (endedRun === undefined || workflow.attempts <= endedRun)) continue;
      this.buffered.push({ workflow, bufferedAt });
    }
    this.startBuffered();
    if (this.stopped) this.giveBack(this.buffered.splice(0));
    else if (this.buffered.length > 0)
      this.bufferTimer ??= setTimeout(() => this.giveBackStale(), BUFFER_HOLD_MS).unref();
  }

  /**
   * Starts buffered workflows in the free slots. Gives them all back while the queue is paused, and gives back
   * instead of starting one held past `BUFFER_HOLD_MS` (after an event-loop stall its lease may have been lost and
   * the workflow recovered elsewhere).
   */
  private startBuffered(): void {
    const { workerConcurrency, paused } = this.deps.settings.effective(this.queueName);
    if (paused) return this.giveBack(this.buffered.splice(0));
    const stale: BufferedWorkflow[] = [];
    while (this.running.size < workerConcurrency && this.buffered.length > 0) {
      const entry = this.buffered.shift()!;
      const waited = performance.now() - entry.bufferedAt;
      if (waited > BUFFER_HOLD_MS) stale.push(entry);
      else this.start({ ...entry.workflow, remainingMs: remainingAfter(entry.workflow.remainingMs, waited) });
    }
    this.giveBack(stale);
  }

  /** Removes a buffered workflow (of `attempt` or earlier, when given); whether one was. */
  private dropBuffered(workflowId: string, attempt?: number): boolean {
    const index = this.buffered.findIndex(
      ({ workflow }) => workflow.workflowId === workflowId && (attempt === undefined || workflow.attempts <= attempt),
    );
    if (index >= 0) this.buffered.splice(index, 1);
    return index >= 0;
  }

  private giveBackStale(): void {
    this.bufferTimer = undefined;
    const heldSince = performance.now() - BUFFER_HOLD_MS;
    const firstFresh = this.buffered.findIndex(({ bufferedAt }) => bufferedAt > heldSince);
    this.giveBack(this.buffered.splice(0, firstFresh < 0 ? this.buffered.length : firstFresh));
    if (this.buffered.length > 0) this.bufferTimer = setTimeout(() => this.giveBackStale(), BUFFER_HOLD_MS).unref();
  }

  private giveBack(entries: BufferedWorkflow[]): void {
    if (entries.length === 0) return;
    const runs = entries.map(({ workflow }) => ({ workflowId: workflow.workflowId, attempt: workflow.attempts }));
    const given = this.deps.store.giveBack(this.deps.executorId, this.queueName, runs).catch((error: unknown) => {
      this.logger.warn(
        `Giving back ${runs.length} buffered workflow(s) of queue "${this.queueName}" failed (they stay PENDING ` +
          `for recovery): ${describeError(error)}`,
      );
    });
    this.givingBack = Promise.all([this.givingBack, given]);
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

  /** The body of a quick queue returned and its outcome is being written: its slot goes to the next workflow. */
  private bodyReturned(run: RunningWorkflow): void {
    if (this.running.get(run.workflowId) !== run) return;
    this.running.delete(run.workflowId);
    this.recording.set(run.workflowId, run);
    run.free();
    if (this.claims.size > 0) this.claimAgain = true;
    this.startBuffered();
  }

  private finished(run: RunningWorkflow): void {
    if (this.running.get(run.workflowId) === run) this.running.delete(run.workflowId);
    if (this.recording.get(run.workflowId) === run) this.recording.delete(run.workflowId);
    run.free();
    this.startBuffered();
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
    this.startBuffered();
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
      const workflow = this.deps.registry.find(claimed.workflowName, claimed.version);
      const outcome = await this.deps.tracer.process(this.queueName, claimed, async (trace) =>
        workflow
          ? this.run(claimed, workflow, run, trace)
          : this.failure(
              claimed,
              new Error(
                `Workflow "${claimed.workflowName}" version ${claimed.version} is not registered in this process`,
              ),
            ),
      );
      if (run.suspended) return;
      const durationMs = performance.now() - startedAt;
      this.bodyMs = this.bodyMs === undefined ? durationMs : this.bodyMs + (durationMs - this.bodyMs) / 8;
      if (controller.signal.aborted) return;
      if (outcome.status === 'ERROR') {
        this.logger.warn(`Workflow ${claimed.workflowName} (${claimed.workflowId}) failed: ${outcome.error?.message}`);
      }
      if (this.quick(this.deps.settings.effective(this.queueName))) this.bodyReturned(run);
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
    const own = this.deps.registry.runOptions(claimed.workflowName, claimed.version);
    await this.recordRunOptions(claimed, own);
    let execution: WorkflowExecution | undefined;
    try {
      const replays = claimed.attempts > 1 || claimed.forked;
      const recorded = replays ? await this.deps.steps.load(this.queueName, workflowId) : new Map();
      execution = new WorkflowExecution(
        {
          workflowId,
          workflowName: claimed.workflowName,
          version: claimed.version,
          queueName: this.queueName,
          attempt: claimed.attempts,
          signal: run.controller.signal,
        },
        this.deps.executorId,
        recorded,
        this.deps.steps,
        (reason) => abort(run, reason),
        trace,
        claimed.deadlineAt,
      );
      const running = execution;
      const result = await this.deps.waits.run(running, () =>
        running.run(() => workflow.run(JSON.parse(claimed.inputsJson) as unknown[])),
      );
      if (running.mismatch) return this.parked(claimed, running.mismatch);
      if (result === SUSPENDED) {
        // NOTE: the workflow is WAITING in Postgres already; this placeholder is never written.
        run.suspended = true;
        return { workflowId, queueName: this.queueName, attempt: claimed.attempts, ...NOTHING_RECORDED };
      }
      const outputJson =
        result === undefined ? null : toStoredJson(result, 'The result', this.deps.steps.database.inputLimits);
      return {
        workflowId,
        queueName: this.queueName,
        attempt: claimed.attempts,
        status: 'SUCCESS',
        outputJson,
        error: null,
      };
    } catch (thrown) {
      const mismatch = execution?.mismatch ?? (thrown instanceof WorkflowDeterminismError ? thrown : undefined);
      if (mismatch) return this.parked(claimed, mismatch);
      const retryable = claimed.failedAttempts + 1 < own.maxAttempts;
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
      await this.deps.store.recordRunOptions(this.queueName, claimed.workflowId, claimed.attempts, own);
    } catch (error) {
      this.logger.warn(`Recording the options of workflow ${claimed.workflowId} failed: ${describeError(error)}`);
    }
  }

  /** A run that met changed code: dead-lettered with the determinism error, keeping its key (see `WorkflowOutcome`). */
  private parked(claimed: ClaimedWorkflow, mismatch: WorkflowDeterminismError): WorkflowOutcome {
    this.logger.warn(
      `Workflow ${claimed.workflowName} version ${claimed.version} (${claimed.workflowId}) is dead-lettered, keeping ` +
        `its key: ${mismatch.message}`,
    );
    return { ...this.failure(claimed, mismatch), status: 'PARKED' };
  }

  private failure(claimed: ClaimedWorkflow, thrown: unknown): WorkflowOutcome {
    const { workflowId, attempts: attempt } = claimed;
    return {
      workflowId,
      queueName: this.queueName,
      attempt,
      status: 'ERROR',
      outputJson: null,
      error: toErrorInfo(thrown),
    };
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

const NOTHING_RECORDED = { status: 'SUCCESS', outputJson: null, error: null } as const;

/** A claim's time left until its timeout, `waitedMs` later. */
function remainingAfter(remainingMs: number | null, waitedMs: number): number | null {
  return remainingMs === null ? null : remainingMs - waitedMs;
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
