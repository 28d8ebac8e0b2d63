import type { EntityManager } from 'typeorm';
import type { QueueDatabase } from '../database/connection/queue-database';
import { isDeadlock } from '../database/connection/sql-errors';
import type { OwnedRow, RecordedStep, StepCheckpoint, StepStore } from '../database/steps/step.store';
import { DatabaseUnavailableError } from '../errors/database-unavailable.error';
import { WorkflowDeterminismError } from '../errors/workflow-determinism.error';
import { WorkflowInterruptedError } from '../errors/workflow-interrupted.error';
import type { StepOptions } from '../interfaces/step-options.interface';
import type { WorkflowContext } from '../interfaces/workflow-context.interface';
import type { RunTrace } from '../observability/workflow.tracer';
import { abortableDelay, backoffDelayMs } from '../utils/backoff';
import { reviveError, toErrorInfo } from '../utils/error-info';
import { fromStoredJson, toStoredJson } from '../utils/stored-json';
import { FramedExecution, executionFrames } from './execution-frames';
import { RecordedTransaction, recordedTransaction } from './recorded-transaction';

/** The step name a patch's marker is recorded under. */
export function patchMarker(patchId: string): string {
  return `patch ${patchId}`;
}

/** How a checkpoint write waits for an unavailable database. */
const CHECKPOINT_RETRY = { initialDelayMs: 100, maxDelayMs: 2000 };

/**
 * One run of one workflow: numbers its steps in call order, replays the ones recorded by earlier runs, and
 * checkpoints new ones while this executor still owns the workflow.
 */
export class WorkflowExecution implements FramedExecution {
  private nextStepIndex = 0;
  /**
   * Set once the run met a recorded position with a different operation (its code changed without a patch): from
   * then on no position is taken, and the run is parked whatever its body does (see `QueueWorker`).
   */
  mismatch?: WorkflowDeterminismError;

  constructor(
    readonly context: WorkflowContext,
    private readonly executorId: string,
    private readonly recorded: ReadonlyMap<number, RecordedStep>,
    private readonly steps: StepStore,
    private readonly interrupt: (reason: 'ownership-lost') => void,
    private readonly trace: RunTrace = { step: (_name, body) => body() },
    readonly deadlineAt: Date | null = null,
    /** The name its row is stored under: its queue's, or on Citus its shard's (see `storedQueueNames`). */
    readonly storedQueueName: string = context.queueName,
  ) {}

  get database(): QueueDatabase {
    return this.steps.database;
  }

  get nextStep(): number {
    return this.nextStepIndex;
  }

  /** Runs the workflow body in this execution's context. */
  run<T>(body: () => Promise<T>): Promise<T> {
    return executionFrames.run({ execution: this, inStep: false }, body);
  }

  async runStep<T>(name: string, fn: () => Promise<T> | T, options: StepOptions): Promise<T> {
    if (this.mismatch) throw this.mismatch;
    const index = this.nextStepIndex++;
    const recorded = this.recorded.get(index);
    if (recorded) {
      return this.replay<T>(index, name, recorded);
    }
    return this.trace.step(name, () => this.runNewStep(index, name, fn, options));
  }

  /**
   * Runs `operation`, something the body does with other workflows (`send`, a child enqueue), as a recorded operation
   * at the next position: in one transaction that locks the workflow's row while this run owns it (`FOR SHARE`: a
   * cancel or a recovery waits for the commit), with the outcome recorded in it, so the operation's writes and its
   * record commit together, or neither does. Re-executed, it returns (or throws) what was recorded without running
   * `operation`. An error `operation` throws is recorded and thrown; while the database is unavailable (or the
   * transaction is a deadlock's victim) it waits and tries again, first looking for the record of a commit whose
   * answer was lost. Effects `operation` registers with `afterCommit` run once it committed.
   */
  async runRecorded<T>(name: string, operation: (transaction: RecordedTransaction) => Promise<T>): Promise<T> {
    if (this.mismatch) throw this.mismatch;
    const index = this.nextStepIndex++;
    const recorded = this.recorded.get(index);
    if (recorded) return this.replay<T>(index, name, recorded);
    return this.trace.step(name, () => this.runNewRecorded(index, name, operation));
  }

  /**
   * Takes the next step position for a durable primitive that records its own checkpoint (`sleep`, `recv`): its
   * index, and what an earlier run recorded there. Throws once the run was interrupted.
   */
  takePosition(): { index: number; recorded?: RecordedStep } {
    this.throwIfInterrupted();
    if (this.mismatch) throw this.mismatch;
    const index = this.nextStepIndex++;
    return { index, recorded: this.recorded.get(index) };
  }

  private async runNewStep<T>(index: number, name: string, fn: () => Promise<T> | T, options: StepOptions): Promise<T> {
    const maxAttempts = options.maxAttempts ?? 1;
    const startedAt = performance.now();
    for (let attempt = 1; ; attempt++) {
      this.throwIfInterrupted();
      try {
        return options.transactional
          ? await this.runInTransaction(index, name, () => fn(), startedAt)
          : await this.runThenRecord(index, name, fn, startedAt);
      } catch (error) {
        if (error instanceof WorkflowInterruptedError || this.context.signal.aborted) throw error;
        if (attempt >= maxAttempts) {
          await this.record(this.checkpoint(index, name, null, error, startedAt));
          throw error;
        }
        await abortableDelay(backoffDelayMs(attempt, options.backoff), this.context.signal);
      }
    }
  }

  private async runNewRecorded<T>(
    index: number,
    name: string,
    operation: (transaction: RecordedTransaction) => Promise<T>,
  ): Promise<T> {
    const startedAt = performance.now();
    for (let attempt = 1; ; attempt++) {
      this.throwIfInterrupted();
      const effects: Array<() => void> = [];
      try {
        const earlier =
          attempt > 1 ? await this.steps.find(this.storedQueueName, this.context.workflowId, index) : undefined;
        if (earlier) return this.replay<T>(index, name, earlier);
        const result = await this.runInTransaction(
          index,
          name,
          (manager) => operation(recordedTransaction(manager, effects)),
          startedAt,
        );
        for (const effect of effects) effect();
        return result;
      } catch (error) {
        if (error instanceof WorkflowInterruptedError || this.context.signal.aborted) throw error;
        if (error instanceof DatabaseUnavailableError || isDeadlock(error)) {
          await abortableDelay(backoffDelayMs(attempt, CHECKPOINT_RETRY), this.context.signal);
          continue;
        }
        await this.record(this.checkpoint(index, name, null, error, startedAt));
        throw error;
      }
    }
  }

  private lockIfOwned(manager: EntityManager): Promise<OwnedRow | undefined> {
    const { workflowId, attempt } = this.context;
    return this.steps.lockIfOwned(manager, this.storedQueueName, workflowId, this.executorId, attempt);
  }

  /** The run called `calledName` at position `index`, where `recordedName` was recorded: see `mismatch`. */
  mismatchAt(index: number, recordedName: string, calledName: string): WorkflowDeterminismError {
    this.mismatch ??= new WorkflowDeterminismError(this.context.workflowId, index, recordedName, calledName);
    return this.mismatch;
  }

  /**
   * `patched(patchId)` at the next position: true (and a marker recorded there, or found) for a run that reaches it
   * with the patch, false (the position left to what an earlier run recorded there) for a run recorded without it.
   */
  async patch(patchId: string): Promise<boolean> {
    this.throwIfInterrupted();
    if (this.mismatch) throw this.mismatch;
    const marker = patchMarker(patchId);
    const recorded = this.recorded.get(this.nextStepIndex);
    if (recorded && recorded.name !== marker) return false;
    const index = this.nextStepIndex++;
    if (!recorded) await this.record(this.checkpoint(index, marker, true, null, performance.now()));
    return true;
  }

  /** `deprecatePatch(patchId)` at the next position: passes over the marker an earlier run's `patched` recorded. */
  deprecatePatch(patchId: string): true {
    this.throwIfInterrupted();
    if (this.mismatch) throw this.mismatch;
    if (this.recorded.get(this.nextStepIndex)?.name === patchMarker(patchId)) this.nextStepIndex++;
    return true;
  }

  private replay<T>(index: number, name: string, recorded: RecordedStep): T {
    if (recorded.name !== name) throw this.mismatchAt(index, recorded.name, name);
    if (recorded.error) throw reviveError(recorded.error);
    return fromStoredJson<T>(recorded.output);
  }

  private async runThenRecord<T>(index: number, name: string, fn: () => Promise<T> | T, startedAt: number): Promise<T> {
    const result = await executionFrames.run({ execution: this, inStep: true }, async () => fn());
    await this.record(this.checkpoint(index, name, result, null, startedAt));
    return result;
  }

  /**
   * Runs `fn` in a transaction that holds the workflow's row while this run owns it, and checkpoints its result in
   * it (a transactional step, a recorded operation).
   */
  private runInTransaction<T>(
    index: number,
    name: string,
    fn: (manager: EntityManager) => Promise<T> | T,
    startedAt: number,
  ): Promise<T> {
    return this.steps.transaction(async (manager) => {
      const owned = await this.lockIfOwned(manager);
      if (!owned) throw this.ownershipLost();
      const result = await executionFrames.run({ execution: this, inStep: true, manager }, async () => fn(manager));
      await this.steps.insert(manager, owned, this.checkpoint(index, name, result, null, startedAt));
      return result;
    });
  }

  /** Checkpoints a step; while the database is unavailable it waits and tries again, until interrupted. */
  private async record(checkpoint: StepCheckpoint): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      this.throwIfInterrupted();
      try {
        if (!(await this.steps.record(checkpoint, this.executorId, this.context.attempt))) throw this.ownershipLost();
        return;
      } catch (thrown) {
        if (!(thrown instanceof DatabaseUnavailableError)) throw thrown;
        await abortableDelay(backoffDelayMs(attempt, CHECKPOINT_RETRY), this.context.signal);
      }
    }
  }

  private checkpoint(index: number, name: string, result: unknown, error: unknown, startedAt: number): StepCheckpoint {
    return {
      workflowId: this.context.workflowId,
      queueName: this.storedQueueName,
      index,
      name,
      outputJson:
        error || result === undefined
          ? null
          : toStoredJson(result, `The result of step "${name}"`, this.database.inputLimits),
      error: error ? toErrorInfo(error) : null,
      durationMs: performance.now() - startedAt,
    };
  }

  /** Interrupts the run: its workflow is no longer PENDING under this executor in this run. Returns the error to throw. */
  ownershipLost(): WorkflowInterruptedError {
    this.interrupt('ownership-lost');
    return this.context.signal.reason instanceof WorkflowInterruptedError
      ? this.context.signal.reason
      : new WorkflowInterruptedError(this.context.workflowId, 'ownership-lost');
  }

  private throwIfInterrupted(): void {
    if (this.context.signal.aborted) throw this.context.signal.reason;
  }
}
