/**
 * Caps on the memory of one worker thread, as Node's `Worker` takes them (`worker_threads` `ResourceLimits`), in
 * megabytes. A body that goes past them ends its thread and fails its attempt with a `WorkflowThreadError`.
 */
export interface IsolationResourceLimits {
  /** The main heap (old generation): the cap that matters for a body that builds large objects. */
  maxOldGenerationSizeMb?: number;
  /** The heap of new objects. Default: Node's, from the old generation's size. */
  maxYoungGenerationSizeMb?: number;
  /** The memory reserved for generated code. */
  codeRangeSizeMb?: number;
  /** The thread's stack. Default 4. */
  stackSizeMb?: number;
}

/**
 * `forRoot({ isolation })`: the pool of worker threads that runs the bodies of `@Workflow({ isolate: 'thread' })`
 * in this process. Threads start when a run needs one, run one body at a time, and end when idle, when recycled or
 * when the application shuts down. See docs/isolation.md.
 */
export interface IsolationOptions {
  /**
   * How many isolated bodies run at once in this process, one per thread; a run that finds every thread busy waits
   * for one, holding its slot. Default: `os.availableParallelism()`.
   */
  threads?: number;
  /** The memory caps of each thread. Default: Node's (a thread may grow as the process may). */
  resourceLimits?: IsolationResourceLimits;
  /** A thread ends after this many runs, and a fresh one takes its place when needed. Default: no limit. */
  maxRunsPerThread?: number;
  /** A thread idle for this long ends (in milliseconds); a fresh one starts when needed. Default 60000. */
  idleTimeoutMs?: number;
  /**
   * The Node options of the threads (Node's `Worker` `execArgv`), e.g. `['--require', 'ts-node/register']` to load
   * TypeScript sources in development. Default: the process's own (`process.execArgv`).
   */
  execArgv?: string[];
}
