import { DedupQueueError } from './dedup-queue.error';

/** Why the worker thread of an isolated body ended it, or could not run it. */
export type WorkflowThreadFailure = 'resource-limits' | 'crashed' | 'exited' | 'load-failed';

/**
 * The body of a `@Workflow({ isolate: 'thread' })` ended with its worker thread instead of returning or throwing:
 * the thread went past `forRoot({ isolation: { resourceLimits } })` (`failure: 'resource-limits'`), an error escaped
 * the body (`'crashed'`, e.g. thrown from a timer callback), the body called `process.exit()` (`'exited'`), or the
 * thread could not load or build the workflow's provider (`'load-failed'`). It fails the attempt like an error the
 * body threw (retries apply); the process and its other workflows run on.
 */
export class WorkflowThreadError extends DedupQueueError {
  constructor(
    readonly workflowId: string,
    readonly failure: WorkflowThreadFailure,
    detail: string,
  ) {
    super(`The worker thread of workflow "${workflowId}" ${detail}`);
  }
}
