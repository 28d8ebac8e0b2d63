import { AsyncLocalStorage } from 'node:async_hooks';
import type { EntityManager } from 'typeorm';
import type { WorkflowExecution } from './workflow-execution';

/** What the code running at a given moment belongs to: a workflow, maybe a step of it, maybe its transaction. */
export interface ExecutionFrame {
  execution: WorkflowExecution;
  inStep: boolean;
  manager?: EntityManager;
}

/** NOTE: one storage for the process is safe: each frame carries its own execution, store and connection. */
export const executionFrames = new AsyncLocalStorage<ExecutionFrame>();
