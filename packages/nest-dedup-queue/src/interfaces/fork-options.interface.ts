/** Options of `QueueService.fork()`. */
export interface ForkOptions {
  /**
   * The position the fork starts at: the source's recorded positions before it (steps, child handles, received
   * messages, waits, patches, events as they were there) are copied and replayed, not run again; from it on, the
   * fork runs its code. A position number (0: a rerun from the start), or `'last-failure'` (the default): every
   * position the source completed is kept, and the fork starts at the step that failed (the position a
   * `WorkflowDeterminismError` names, for a run parked by a code change).
   */
  fromStep?: number | 'last-failure';
  /**
   * The fork's workflow ID. Default: `<source ID>-fork-<start position>`, so that a retried call returns the same
   * fork instead of making a second one. Giving an ID that names a workflow already returns that workflow.
   */
  workflowId?: string;
  /** The version the fork records and runs with (default: the source's). */
  version?: number;
  /**
   * What to do when another workflow holds the source's deduplication ID: `'reject'` (the default:
   * `QueueDeduplicatedError`), `'return-existing'` (the holder's handle, `created: false`) or `'supersede'` (the
   * holder ends `CANCELLED` and the fork takes the key). A source parked by a code change that still holds its key
   * hands it to its fork.
   */
  onDuplicate?: 'reject' | 'return-existing' | 'supersede';
}

/** Options of `QueueService.forkMany()`: as `fork`'s, for every matched workflow. */
export interface ForkManyOptions {
  /** As `ForkOptions.fromStep`, for every source (`'last-failure'`, the default, is each one's own). */
  fromStep?: number | 'last-failure';
  /** As `ForkOptions.version`. */
  version?: number;
  /** `'reject'` (the default: the source's outcome is `key-held`) or `'supersede'`. */
  onDuplicate?: 'reject' | 'supersede';
}

/**
 * What `forkMany` did with one matched workflow: `forked` (a new fork, `forkWorkflowId`), `existing` (its fork was
 * made by an earlier call: `forkWorkflowId`), `key-held` (another workflow holds its deduplication ID: nothing was
 * written), `not-forkable` (it has not finished: queued, delayed, running or waiting).
 */
export type ForkOutcome = 'forked' | 'existing' | 'key-held' | 'not-forkable';

/** One workflow `forkMany` matched, and what it did with it. */
export interface ForkResult {
  workflowId: string;
  outcome: ForkOutcome;
  forkWorkflowId?: string;
}
