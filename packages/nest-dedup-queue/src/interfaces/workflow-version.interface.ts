/** One name and version of a workflow, as `QueueService.listVersions()` reports it. */
export interface WorkflowVersionInfo {
  workflowName: string;
  version: number;
  /**
   * Its runs that have not finished, in every queue: queued, delayed, running, waiting, and dead-lettered (a dead
   * letter waits for `resume`, which needs the code). "Can version 1 be removed?" is `unfinished === 0`.
   */
  unfinished: number;
  /** How many live executors register it, and so claim its runs in the queues they drain. */
  executors: number;
}

/**
 * Runs that no live executor would claim: queued, delayed or waiting runs of a name and version that no live executor
 * draining their queue registers. They keep their keys and wait until a process that registers them starts.
 */
export interface StrandedRuns {
  queueName: string;
  workflowName: string;
  version: number;
  /** How many runs. */
  count: number;
}
