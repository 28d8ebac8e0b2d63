import { executionFrames } from './execution-frames';

type InsideWorkflowFunction = (...args: never[]) => Promise<unknown>;

const functions = new Map<string, InsideWorkflowFunction>();

/**
 * Declares an inside-workflow function (`runStep`, `sleep`, `recv`, `setEvent`, ...) under `name`. Called in the
 * body of an isolated workflow (`@Workflow({ isolate: 'thread' })`), in its worker thread, the call is forwarded to
 * the main thread and `fn` runs there, in the run's own execution frame: it takes the run's next position and is
 * recorded exactly as in any other body (functions given as arguments, such as a step's body, are called back in
 * the thread). Anywhere else `fn` is simply called. A new function needs this one line:
 * `export const sleep = insideWorkflowFunction('sleep', async (ms: number): Promise<void> => { ... })`.
 */
export function insideWorkflowFunction<F extends InsideWorkflowFunction>(name: string, fn: F): F {
  functions.set(name, fn);
  const forwarding = (...args: Parameters<F>): Promise<unknown> => {
    const forward = executionFrames.getStore()?.forward;
    return forward ? forward({ function: name }, args) : fn(...args);
  };
  return Object.defineProperty(forwarding, 'name', { value: name }) as unknown as F;
}

/** The function declared under `name`, for a call an isolated body forwarded; undefined when there is none. */
export function insideWorkflowFunctionNamed(name: string): InsideWorkflowFunction | undefined {
  return functions.get(name);
}
