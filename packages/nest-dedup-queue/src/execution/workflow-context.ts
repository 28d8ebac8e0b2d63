import type { EntityManager } from 'typeorm';
import { DedupQueueError } from '../errors/dedup-queue.error';
import type { StepOptions } from '../interfaces/step-options.interface';
import { executionFrames } from './execution-frames';

/** What a running workflow knows about itself. */
export interface WorkflowContext {
  readonly workflowId: string;
  readonly workflowName: string;
  readonly queueName: string;
  /** 1 on the first run; higher after retries and recoveries. */
  readonly attempt: number;
  /**
   * Aborts when the workflow is cancelled, times out, is recovered by another process, or is interrupted by
   * shutdown; `signal.reason` is a `WorkflowInterruptedError`. Pass it to fetch, timers and drivers that take one.
   */
  readonly signal: AbortSignal;
}

/** The context of the workflow whose code is running. Throws outside a workflow. */
export function workflowContext(): WorkflowContext {
  const frame = executionFrames.getStore();
  if (!frame) {
    throw new DedupQueueError(
      'workflowContext() is only available while a workflow runs (inside a @Workflow() method)',
    );
  }
  return frame.execution.context;
}

/**
 * The TypeORM `EntityManager` of the running transactional step (`@Step({ transactional: true })`). Writes made
 * through it commit in the same transaction as the step's checkpoint: exactly once.
 */
export function stepManager(): EntityManager {
  const manager = executionFrames.getStore()?.manager;
  if (!manager) {
    throw new DedupQueueError('stepManager() is only available inside a step declared with { transactional: true }');
  }
  return manager;
}

/**
 * Runs `fn` as a durable step of the running workflow: its result (or error) is checkpointed, and when the workflow
 * runs again after a crash or retry, the recorded outcome is returned without calling `fn`. Outside a workflow, or
 * inside another step, `fn` simply runs.
 */
export function runStep<T>(name: string, fn: () => Promise<T> | T, options: StepOptions = {}): Promise<T> {
  const frame = executionFrames.getStore();
  if (!frame || frame.inStep) {
    return Promise.resolve().then(fn);
  }
  return frame.execution.runStep(name, fn, options);
}
