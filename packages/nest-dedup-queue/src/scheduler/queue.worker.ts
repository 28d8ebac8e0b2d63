import { type ResolvedQueue, hasGlobalLimits } from '../dedup-queue.config';
import type { ClaimRequest, ClaimedWorkflow } from '../database/workflows/claim/claimed-rows';
import type { WorkflowClaimer } from '../database/workflows/claim/workflow-claimer';
import type { WorkflowControlStore } from '../database/workflows/control/workflow-control.store';
import type { WorkflowOutcome, WorkflowOutcomeStore } from '../database/workflows/finish/workflow-outcomes.store';
import type { WorkflowRegistry } from '../discovery/workflow.registry';
import { describeError } from '../database/connection/connection-monitor';
import { DatabaseUnavailableError } from '../errors/database-unavailable.error';
import type { InterruptReason } from '../errors/workflow-interrupted.error';
import {
  type WorkflowLifecycle,
  runOutcomeEvent,
  runOutcomeEventName,
} from '../observability/workflow-lifecycle.events';
import { backoffDelayMs } from '../utils/backoff';
import { FailureLog } from '../utils/failure-log';
import type { AbandonedRunInfo } from '../interfaces/abandoned-run.interface';
import type { QueueSettings } from '../queue-settings';
import type { WorkflowCompletions } from '../workflow-completions';
import { AbandonedRuns } from './abandoned-runs';
import { type BodyRunner, SUSPENDED } from './body-runner';
import { ClaimBuffer } from './claim-buffer';
import { RunSignal } from './run-signal';
import { RunSlot } from './run-slot';
import type { ClaimWithOutcomes, OutcomeWriter } from './outcome.writer';
import { ModuleLogger } from '../utils/module-logger';

/** After a failed claim (a lock timeout, a lost connection), back off and try again. */
const CLAIM_BACKOFF = { initialDelayMs: 100, maxDelayMs: 5000 };
/** How many full claims in a row a shard of a queue with shards gives before the next shard's turn. */
const SHARD_TURN = 8;
/** A queue's workflows are quick while their bodies take less than this, on average (see `QueueWorker`). */
const QUICK_BODY_MS = 10;
/**
 * How many workflows a quick queue claims ahead at least, whatever its `workerConcurrency`, as long as its slots
 * start them within `QUICK_BODY_MS` (see `aheadRows`): each outcome write and claim costs the database about the same
 * whatever its rows, so a queue of few slots would otherwise pay it for a handful of workflows.
 */
const AHEAD_ROWS = 32;

export interface QueueWorkerDependencies {
  control: WorkflowControlStore;
  outcomeStore: WorkflowOutcomeStore;
  claimer: WorkflowClaimer;
  settings: QueueSettings;
  registry: WorkflowRegistry;
  runner: BodyRunner;
  outcomes: OutcomeWriter;
  completions: WorkflowCompletions;
  executorId: string;
  /**
   * The names its rows are stored under: its own, or on Citus those of its shards (see `storedQueueNames`), claimed
   * in turn.
   */
  storedQueueNames: readonly string[];
  /** False while the scheduler reconciles after a claim whose answer was lost. */
  claimsAllowed(): boolean;
  /** A claim failed with the connection: it may have taken workflows this process never heard of. */
  claimMayHaveBeenLost(): void;
  lifecycle: WorkflowLifecycle;
}

/** One run of one workflow in this process: `attempt` is its claim number, which no later run shares. */
interface RunningWorkflow {
  workflowId: string;
  storedQueueName: string;
  workflowName: string;
  attempt: number;
  control: RunSignal;
  done: Promise<void>;
  /** Whether it holds a slot: freed when it returned, or it was abandoned. */
  slot: RunSlot;
}

/** The cancels announced while a claim was in flight, for workflows not known here: ID and the run each ended. */
type CancelledMeanwhile = Map<string, number | undefined>;

/** A claim counted as in flight (see `QueueWorker.claimStarted`). */
interface InFlightClaim {
  /** Stops counting it; called once it returned or failed. */
  settle: () => void;
  cancelled: CancelledMeanwhile;
  /** Whether a wake-up arrived since the claim was made: work its snapshot may not hold. */
  wokenSince: () => boolean;
}

/**
 * Drains one queue in this process: claim, run, record. It claims when woken (work was announced, a timer fired)
 * and after each recorded outcome, runs each claimed workflow in one of `workerConcurrency` slots with its recorded
 * steps, and records its outcome (or schedules a retry); in a queue without global limits the next claim rides in
 * the statement that records outcomes. A slot frees once its outcome is recorded, so the executor's PENDING rows
 * are at most `workerConcurrency`, with one exception: while a queue without global limits is quick (its bodies
 * average under `QUICK_BODY_MS`), a slot frees as soon as the body returns (the outcome is written meanwhile), and
 * a claim riding in an outcome write asks for more than the free slots (`aheadRows`), into a local buffer
 * (`ClaimBuffer`) started in claim order as slots free, so that the next workflows are already here while the write
 * is in the database. Claims in flight count against the room.
 */
export class QueueWorker {
  private readonly logger = new ModuleLogger('DedupQueueScheduler');
  private readonly running = new Map<string, RunningWorkflow>();
  /** Runs whose body returned while their outcome is being written: still PENDING here, outside any slot. */
  private readonly recording = new Map<string, RunningWorkflow>();
  private readonly buffer: ClaimBuffer;
  private readonly abandoned: AbandonedRuns;
  /** A moving average of how long bodies take, in milliseconds; undefined before the first returns. */
  private bodyMs?: number;
  /**
   * The claims in flight (one of `claimLoop`, and those attached to outcome writes), each with the cancels announced
   * meanwhile for workflows not known here: the claim may have taken them before the cancel, so they are dropped
   * when it returns.
   */
  private readonly claims = new Map<Promise<void>, CancelledMeanwhile>();
  /** What the claims in flight ask for in all. */
  private claimingLimit = 0;
  private claimLoopRun?: Promise<void>;
  private claimAgain = false;
  /** False once an unconstrained claim came back short and nothing announced new work since it was made. */
  private mayHaveWork = true;
  /**
   * Whether the last unconstrained claim came back full (or left a shard unclaimed): a backlog, drained by claims
   * riding in outcome writes. Otherwise new work is claimed by a claim of its own, which commits without waiting for
   * the disk, instead of waiting for an outcome write's durable commit.
   */
  private backlogged = true;
  /** Counts the wake-ups, so that a claim knows whether one arrived while it was in flight (see `claimStarted`). */
  private wakeUps = 0;
  private stopped = false;
  private retryTimer?: NodeJS.Timeout;
  private failedClaims = 0;
  /** The stored name claims take from (each process starts at a shard of its own)... */
  private shard: number;
  /** ...how many full claims it gave in a row (at `SHARD_TURN`, the next shard's turn)... */
  private fullClaims = 0;
  /**
   * ...and the stored names known empty: a claim of theirs came back short with no wake-up since it was made. The
   * turn passes them by until a wake-up names them (or names none: a poll, a timer); once every name is known empty,
   * the queue holds no more than those claims saw.
   */
  private readonly emptyNames = new Set<string>();
  private readonly claimFailures = new FailureLog(this.logger);

  constructor(
    private readonly queueName: string,
    private readonly deps: QueueWorkerDependencies,
  ) {
    this.buffer = new ClaimBuffer(queueName, {
      store: deps.outcomeStore,
      settings: deps.settings,
      executorId: deps.executorId,
      logger: this.logger,
      hasFreeSlot: () => this.running.size < this.deps.settings.effective(this.queueName).workerConcurrency,
      start: (workflow) => this.start(workflow),
    });
    this.abandoned = new AbandonedRuns(queueName, this.logger);
    this.shard = Math.floor(Math.random() * deps.storedQueueNames.length);
  }

  /**
   * Asks the worker to look for work now (new work was announced, or a timer fired). Cheap to call often:
   * concurrent wake-ups fold into one claim. One that arrives while claims are in flight leads to a claim made after
   * it (when a slot is free), since theirs may not hold the new work. `storedQueueName`: the stored name the work was
   * announced under (a wake-up's payload); without it, or with a name not of this queue, every name may hold work.
   */
  wake(storedQueueName?: string): void {
    this.wakeUps += 1;
    this.mayHaveWork = true;
    if (storedQueueName !== undefined && this.deps.storedQueueNames.includes(storedQueueName)) {
      this.emptyNames.delete(storedQueueName);
    } else {
      this.emptyNames.clear();
    }
    this.buffer.startInFreeSlots();
    this.claimSoon();
  }

  /** Stops claiming and gives back the buffered workflows; running workflows go on. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.buffer.stop();
  }

  /** Aborts the signal of a workflow running here, if it is; a buffered one is dropped (it is no longer ours). */
  interrupt(workflowId: string, reason: InterruptReason): void {
    const run = this.running.get(workflowId);
    if (run) abort(run, reason);
    this.buffer.drop(workflowId);
  }

  interruptAll(reason: InterruptReason): void {
    for (const workflowId of this.running.keys()) this.interrupt(workflowId, reason);
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
    if (this.buffer.drop(workflowId, attempt)) return;
    for (const cancelled of this.claims.values()) cancelled.set(workflowId, attempt);
    this.endedElsewhere();
  }

  /** Whether this worker may hold the workflow: runs it, buffers it, or has a claim in flight that may take it. */
  mayHold(workflowId: string): boolean {
    return this.running.has(workflowId) || this.claims.size > 0 || this.buffer.workflowIds().includes(workflowId);
  }

  /** The stored names the workflow may be held under here (see `mayHold`): its own when known, else all of them. */
  storedNamesThatMayHold(workflowId: string): string[] {
    const known = this.heldRuns().find((run) => run.workflowId === workflowId);
    if (known) return [known.queueName];
    return this.claims.size > 0 ? [...this.deps.storedQueueNames] : [];
  }

  /** A workflow not held here ended: a queue with global limits looks for work, since it may have held a slot. */
  endedElsewhere(): void {
    if (hasGlobalLimits(this.deps.settings.effective(this.queueName))) this.wake();
  }

  /** The bodies of cancelled or timed-out workflows that still run in this process, outside any slot. */
  abandonedRuns(): AbandonedRunInfo[] {
    return this.abandoned.list();
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
          ...[...this.running.values()].map((run) => run.slot.freed),
          ...[...this.recording.values()].map((run) => run.done),
        ]);
      }
      await this.buffer.givenBack();
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
    return [...new Set([...this.running.keys(), ...this.recording.keys(), ...this.buffer.workflowIds()])];
  }

  /** `runningIds`, each with the name its row is stored under. */
  heldRuns(): { workflowId: string; queueName: string }[] {
    const runs = [...this.running.values(), ...this.recording.values()].map((run) => ({
      workflowId: run.workflowId,
      queueName: run.storedQueueName,
    }));
    const known = new Set(runs.map((run) => run.workflowId));
    return [...runs, ...this.buffer.heldRuns().filter((run) => !known.has(run.workflowId))];
  }

  get runningCount(): number {
    return this.running.size;
  }

  // Claim

  private claimSoon(): void {
    if (this.stopped || !this.mayHaveWork) return;
    if (this.claimLoopRun) {
      this.claimAgain = true;
      return;
    }
    this.claimLoopRun = this.claimLoop().finally(() => (this.claimLoopRun = undefined));
  }

  /**
   * The claim to make in the statement that records `outcomes` of this queue: as many as `claimRoom`, counting the
   * slots that recording them frees, and claiming ahead while the queue is quick. None while claims are held, the
   * queue has global limits or is paused, or the last claim came back short: work announced since is claimed by a
   * claim of its own (sent on its wake-up), not held until the outcome write's durable commit.
   */
  claimWithOutcomes(outcomes: WorkflowOutcome[]): ClaimWithOutcomes | undefined {
    if (this.stopped || !this.mayHaveWork || !this.backlogged || !this.deps.claimsAllowed()) return undefined;
    const queue = this.deps.settings.effective(this.queueName);
    if (queue.paused || hasGlobalLimits(queue)) return undefined;
    const freeing = outcomes.filter((outcome) => this.running.get(outcome.workflowId)?.attempt === outcome.attempt);
    const limit = this.claimRoom(queue, freeing.length, this.quick(queue));
    if (limit <= 0) return undefined;
    const claim = this.claimStarted(limit);
    this.claimAgain = false;
    const request = { ...this.claimRequest(queue), limit };
    const attached = this.deps.claimer.attachable(request);
    return {
      ...attached,
      deliver: (claimedJson, error) => {
        claim.settle();
        if (claimedJson) {
          const workflows = attached.read(claimedJson);
          this.take(workflows, claim.cancelled);
          const full = workflows.length === limit;
          const more = this.mayHoldMore(request.storedQueueName, full, claim.wokenSince());
          this.claimReturned(claim, more);
          if (more && !full) this.claimAgain = true;
        } else if (error instanceof DatabaseUnavailableError) {
          this.deps.claimMayHaveBeenLost();
        }
        if (this.claimAgain || claim.wokenSince()) this.claimSoon();
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
        const request = { ...this.claimRequest(queue), limit };
        const { workflows, retryInMs } = await this.deps.claimer.claim(request).finally(claim.settle);
        this.failedClaims = 0;
        this.claimFailures.succeeded();
        this.take(workflows, claim.cancelled);
        if (retryInMs !== undefined) {
          this.wakeLater(retryInMs);
        } else {
          const more = this.mayHoldMore(request.storedQueueName, workflows.length === limit, claim.wokenSince());
          if (more) this.claimAgain = true;
          if (!hasGlobalLimits(queue)) this.claimReturned(claim, more);
        }
      } while (this.claimAgain && this.mayHaveWork && !this.stopped);
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

  /** A claim of the queue, from the stored name whose turn it is. */
  private claimRequest(queue: ResolvedQueue): Omit<ClaimRequest, 'limit'> & { storedQueueName: string } {
    if (this.emptyNames.has(this.deps.storedQueueNames[this.shard])) this.passTurn();
    const storedQueueName = this.deps.storedQueueNames[this.shard];
    return { queue, storedQueueName, executorId: this.deps.executorId, claimKeys: this.deps.registry.claimKeys() };
  }

  /**
   * A claim of `storedQueueName` came back `full`, or short: whether the queue may hold more (a name not known empty
   * may). A short claim with no wake-up since it was made (`wokenSince`) marks its name empty (`emptyNames`). A shard
   * keeps its turn while its claims come back full, up to `SHARD_TURN` of them (the workflows running at once, and so
   * each outcome batch, mostly of one shard: one statement on one node), then the next shard's turn comes.
   */
  private mayHoldMore(storedQueueName: string, full: boolean, wokenSince: boolean): boolean {
    const names = this.deps.storedQueueNames;
    if (!full && !wokenSince) this.emptyNames.add(storedQueueName);
    this.fullClaims = full ? this.fullClaims + 1 : 0;
    if (!full || this.fullClaims >= SHARD_TURN) this.passTurn();
    return full || (names.length > 1 && this.emptyNames.size < names.length);
  }

  /** Gives the turn to the next stored name not known empty (to the next name when all are). */
  private passTurn(): void {
    const names = this.deps.storedQueueNames;
    this.fullClaims = 0;
    for (let step = 1; step <= names.length; step++) {
      const next = (this.shard + step) % names.length;
      if (!this.emptyNames.has(names[next]) || step === names.length) {
        this.shard = next;
        return;
      }
    }
  }

  /**
   * How many to claim now (0 or less: none): the free slots (with those `freeing`: outcomes being recorded with this
   * claim), and `aheadRows` more when claiming `ahead`, less the buffer and what the claims in flight ask for.
   */
  private claimRoom(queue: ResolvedQueue, freeing = 0, ahead = false): number {
    const capacity = queue.workerConcurrency + (ahead ? this.aheadRows(queue.workerConcurrency) : 0);
    return capacity - (this.running.size - freeing) - this.buffer.size - this.claimingLimit;
  }

  /**
   * How many a quick queue claims ahead of its free slots: `workerConcurrency`, or up to `AHEAD_ROWS` when its slots
   * start that many within `QUICK_BODY_MS` at the bodies' average pace, so that no buffered workflow waits longer.
   */
  private aheadRows(workerConcurrency: number): number {
    const startedInTime = Math.floor(
      (workerConcurrency * QUICK_BODY_MS) / Math.max(this.bodyMs ?? QUICK_BODY_MS, 0.001),
    );
    return Math.max(workerConcurrency, Math.min(AHEAD_ROWS, startedInTime));
  }

  /** Whether the queue's bodies are quick (see the class doc): never with global limits, whose counts stay exact. */
  private quick(queue: ResolvedQueue): boolean {
    return !hasGlobalLimits(queue) && this.bodyMs !== undefined && this.bodyMs < QUICK_BODY_MS;
  }

  /**
   * An unconstrained claim came back: `full` (it took all it asked for), the queue may hold more; short, it holds no
   * more than the claim saw, unless a wake-up arrived while it was in flight: the claim's snapshot may predate the
   * enqueue that announced it, so the work stays to be claimed.
   */
  private claimReturned(claim: InFlightClaim, full: boolean): void {
    this.backlogged = full;
    if (full) this.mayHaveWork = true;
    else if (!claim.wokenSince()) this.mayHaveWork = false;
  }

  /**
   * Counts a claim of `limit` as in flight until its `settle` is called, and notes the wake-ups so far: those after
   * are ones its statement, sent after this call, may not have seen.
   */
  private claimStarted(limit: number): InFlightClaim {
    const wakeUps = this.wakeUps;
    let resolve = () => undefined as void;
    const claim = new Promise<void>((done) => (resolve = done));
    const cancelled: CancelledMeanwhile = new Map();
    this.claims.set(claim, cancelled);
    this.claimingLimit += limit;
    const settle = () => {
      if (!this.claims.delete(claim)) return;
      this.claimingLimit -= limit;
      resolve();
    };
    return { settle, cancelled, wokenSince: () => this.wakeUps !== wakeUps };
  }

  /**
   * Starts claimed workflows in free slots and buffers the rest, but for those a cancel ended while their claim was
   * in flight (`cancelled`): they are no longer PENDING, so they are dropped.
   */
  private take(workflows: ClaimedWorkflow[], cancelled: CancelledMeanwhile): void {
    this.buffer.add(
      workflows.filter(({ workflowId, attempts }) => {
        const endedRun = cancelled.get(workflowId);
        return !cancelled.has(workflowId) || (endedRun !== undefined && attempts > endedRun);
      }),
    );
  }

  // Run

  private start(claimed: ClaimedWorkflow): void {
    // NOTE: claimed again while an earlier run still holds its slot: it was cancelled and resumed before the cancel
    // reached this process. That run can no longer write (outcomes and steps are fenced by attempt), so it goes.
    const earlier = this.running.get(claimed.workflowId);
    if (earlier) this.abandon(earlier, 'cancelled');
    const run: RunningWorkflow = {
      workflowId: claimed.workflowId,
      storedQueueName: claimed.storedQueueName,
      workflowName: claimed.workflowName,
      attempt: claimed.attempts,
      control: new RunSignal(claimed.workflowId),
      done: Promise.resolve(),
      slot: new RunSlot(),
    };
    this.running.set(run.workflowId, run);
    run.done = this.execute(claimed, run).finally(() => this.finished(run));
  }

  private async execute(claimed: ClaimedWorkflow, run: RunningWorkflow): Promise<void> {
    const remainingMs = claimed.remainingMs;
    const timeout =
      remainingMs === null ? undefined : setTimeout(() => void this.timeOut(run), Math.max(0, remainingMs));
    if (this.deps.lifecycle.wants('started')) {
      this.deps.lifecycle.emit({
        event: 'started',
        workflowId: claimed.workflowId,
        queueName: this.queueName,
        workflowName: claimed.workflowName,
        attempt: claimed.attempts,
        waitSeconds: claimed.waitSeconds,
      });
    }
    const startedAt = performance.now();
    try {
      const outcome = await this.deps.runner.run(claimed.storedQueueName, claimed, run.control);
      if (outcome === SUSPENDED) return;
      const durationMs = performance.now() - startedAt;
      this.bodyMs = this.bodyMs === undefined ? durationMs : this.bodyMs + (durationMs - this.bodyMs) / 8;
      if (run.control.aborted) return;
      await this.record(run, outcome, durationMs);
    } finally {
      clearTimeout(timeout);
    }
  }

  // Record

  private async record(run: RunningWorkflow, outcome: WorkflowOutcome, durationMs: number): Promise<void> {
    if (outcome.status === 'ERROR') {
      this.logger.warn(`Workflow ${run.workflowName} (${run.workflowId}) failed: ${outcome.error?.message}`);
    }
    if (this.quick(this.deps.settings.effective(this.queueName))) this.bodyReturned(run);
    const written = await this.deps.outcomes.write(outcome, run.storedQueueName);
    if (written && this.deps.lifecycle.wants(runOutcomeEventName(outcome))) {
      const ref = { workflowId: run.workflowId, queueName: this.queueName, workflowName: run.workflowName };
      this.deps.lifecycle.emit(runOutcomeEvent(ref, run.attempt, outcome, durationMs));
    }
    if (outcome.retryDelayMs !== undefined) setTimeout(() => this.wake(), outcome.retryDelayMs).unref();
  }

  /** The body of a quick queue returned and its outcome is being written: its slot goes to the next workflow. */
  private bodyReturned(run: RunningWorkflow): void {
    if (this.running.get(run.workflowId) !== run) return;
    this.running.delete(run.workflowId);
    this.recording.set(run.workflowId, run);
    run.slot.free();
    if (this.claims.size > 0) this.claimAgain = true;
    this.buffer.startInFreeSlots();
  }

  private finished(run: RunningWorkflow): void {
    if (this.running.get(run.workflowId) === run) this.running.delete(run.workflowId);
    if (this.recording.get(run.workflowId) === run) this.recording.delete(run.workflowId);
    run.slot.free();
    this.buffer.startInFreeSlots();
    this.abandoned.returned(run);
    this.deps.completions.finished(run.workflowId);
    this.claimSoon();
  }

  private abandon(run: RunningWorkflow, reason: 'cancelled' | 'timed-out'): void {
    abort(run, reason);
    this.running.delete(run.workflowId);
    run.slot.free();
    this.abandoned.add(run, reason);
    this.buffer.startInFreeSlots();
    this.claimSoon();
  }

  /**
   * Aborts the run at its deadline, then frees its slot once Postgres has it CANCELLED (so global counts agree).
   * An abandoned run's deadline no longer counts: its workflow may run again, resumed, with a deadline of its own.
   */
  private async timeOut(run: RunningWorkflow): Promise<void> {
    if (this.running.get(run.workflowId) !== run) return;
    abort(run, 'timed-out');
    try {
      const cancelled = await this.deps.control.cancel(run.workflowId, 'timed-out');
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
  run.control.interrupt(reason);
}
