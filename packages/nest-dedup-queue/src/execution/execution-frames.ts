import { AsyncLocalStorage } from 'node:async_hooks';
import type { EntityManager } from 'typeorm';
import type { QueueDatabase } from '../database/connection/queue-database';
import type { StepOptions } from '../interfaces/step-options.interface';
import type { WorkflowContext } from '../interfaces/workflow-context.interface';
import type { RecordedTransaction } from './recorded-transaction';

/** What the workflow's own code reaches of the run it belongs to: its context and its next step. */
export interface FramedExecution {
  readonly context: WorkflowContext;
  /** The name its row is stored under: its queue's, or on Citus its shard's (see `storedQueueNames`). */
  readonly storedQueueName: string;
  /** The module's database, for what the workflow's code records besides steps (events). */
  readonly database: QueueDatabase;
  /** The position the next `runStep` call takes (a child workflow's ID is derived from it). */
  readonly nextStep: number;
  /** The run's deadline by the database's clock (its own timeout's, or its parent's), or null; its children inherit it. */
  readonly deadlineAt: Date | null;
  runStep<T>(name: string, fn: () => Promise<T> | T, options: StepOptions): Promise<T>;
  /** See `WorkflowExecution.runRecorded`. */
  runRecorded<T>(name: string, operation: (transaction: RecordedTransaction) => Promise<T>): Promise<T>;
  /** `patched(patchId)` at the next position (see `WorkflowExecution.patch`). */
  patch(patchId: string): Promise<boolean>;
  /** `deprecatePatch(patchId)` at the next position (see `WorkflowExecution.deprecatePatch`). */
  deprecatePatch(patchId: string): true;
}

/** What a call from an isolated body names in the main thread: an inside-workflow function, a service's method, or a method of an object an earlier call returned. */
export type ForwardedCallTarget =
  { function: string } | { service: string; method: string } | { object: number; method: string | null };

/** What the code running at a given moment belongs to: a workflow, maybe a step of it, maybe its transaction. */
export interface ExecutionFrame {
  execution: FramedExecution;
  inStep: boolean;
  manager?: EntityManager;
  /**
   * In the worker thread of an isolated body: sends an inside-workflow call to the main thread, which runs it in the
   * run's own frame there and answers with its outcome.
   */
  forward?: (target: ForwardedCallTarget, args: unknown[]) => Promise<unknown>;
  /** In the main thread: the call was forwarded by an isolated body (see `forward`). */
  isolated?: boolean;
}

/** NOTE: one storage for the process is safe: each frame carries its own execution, store and connection. */
export const executionFrames = new AsyncLocalStorage<ExecutionFrame>();
