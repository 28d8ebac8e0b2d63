import type { EntityManager } from 'typeorm';
import { DedupQueueError } from '../errors/dedup-queue.error';
import type { StepOptions } from '../interfaces/step-options.interface';
import type { WorkflowContext } from '../interfaces/workflow-context.interface';
import { executionFrames } from './execution-frames';
import { insideWorkflowFunction } from './inside-workflow-function';

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
export const runStep = insideWorkflowFunction(
  'runStep',
  <T>(name: string, fn: () => Promise<T> | T, options: StepOptions = {}): Promise<T> => {
    const frame = executionFrames.getStore();
    if (!frame || frame.inStep) {
      return Promise.resolve().then(fn);
    }
    if (options?.transactional && frame.isolated) {
      return Promise.reject(
        new DedupQueueError(
          `Step "${name}" is transactional, which an isolated body (@Workflow({ isolate: 'thread' })) cannot run: ` +
            `its transaction cannot cross into the worker thread. Call it from a workflow that is not isolated, ` +
            `or make it a step without { transactional: true }`,
        ),
      );
    }
    return frame.execution.runStep(name, fn, options);
  },
);
