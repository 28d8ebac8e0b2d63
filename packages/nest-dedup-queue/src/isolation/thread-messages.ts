import type { IsolatedTarget } from '../discovery/workflow.registry';
import type { ForwardedCallTarget } from '../execution/execution-frames';
import type { WorkflowErrorInfo } from '../interfaces/workflow-status.interface';
import type { ValueLimits } from '../utils/stored-json';

/** How a call across the thread boundary ended: its value (encoded, see `crossing.ts`), or what it threw. */
export type CallOutcome = { value: unknown } | { error: WorkflowErrorInfo };

/** What an isolated body knows of its run: its context, but for the signal, which each thread keeps its own of. */
export interface RunContextData {
  workflowId: string;
  workflowName: string;
  version: number;
  queueName: string;
  attempt: number;
}

/** What the threads are started with. */
export interface ThreadData {
  /** The declared queues, for the `WorkflowQueue`s that `@InjectQueue()` gives in the thread. */
  queueNames: string[];
  /** The limits of a stored value (`forRoot({ inputLimits })`), which a body's result must keep to. */
  inputLimits: ValueLimits;
}

/** From the main thread to a worker thread. */
export type ToThread =
  /** Load these workflows' classes and build their providers now (at boot), and say which failed. */
  | { kind: 'load'; targets: IsolatedTarget[] }
  | { kind: 'run'; runId: number; target: IsolatedTarget; context: RunContextData; inputsJson: string }
  /** The run's signal aborted in the main thread: abort it in the thread too. */
  | { kind: 'abort'; runId: number; reason: WorkflowErrorInfo }
  | { kind: 'reply'; runId: number; callId: number; outcome: CallOutcome }
  /** Call a function the body passed with a forwarded call (a step's body), in the frame `inStep` tells. */
  | { kind: 'invoke'; runId: number; invocationId: number; callbackId: number; args: unknown[]; inStep: boolean }
  /** The run is over for its worker (its body was suspended in a durable wait): forget it. */
  | { kind: 'end'; runId: number }
  /** End the thread once its providers are closed. */
  | { kind: 'close' };

/** From a worker thread to the main thread. */
export type FromThread =
  | { kind: 'loaded'; failures: { target: IsolatedTarget; error: WorkflowErrorInfo }[] }
  | { kind: 'call'; runId: number; callId: number; target: ForwardedCallTarget; args: unknown[]; inStep: boolean }
  | { kind: 'invoked'; runId: number; invocationId: number; outcome: CallOutcome }
  | { kind: 'done'; runId: number; outputJson: string | null }
  | { kind: 'failed'; runId: number; error: WorkflowErrorInfo }
  | { kind: 'log'; level: LogLevelName; message: unknown; params: unknown[] };

export type LogLevelName = 'log' | 'error' | 'warn' | 'debug' | 'verbose' | 'fatal';
