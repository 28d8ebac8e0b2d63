import type { Type } from '@nestjs/common';
import type { BackoffOptions } from './backoff-options.interface';

/**
 * Options of the `@Workflow()` decorator. `maxAttempts`, `backoff` and `maxRecoveryAttempts` are the workflow's own:
 * the process that runs it applies its own decorator's, whatever the enqueuing process had (or lacked).
 */
export interface WorkflowOptions {
  /** The registered name. Default `ClassName.methodName`. With `version`, unique in the application. */
  name?: string;
  /**
   * The version of the workflow this method runs (a positive integer; default 1). Each run records the version it
   * was enqueued with, and a worker claims only the names and versions its process registers, so a changed body gets
   * a new version while the old method stays until the old runs are done: two methods may register one `name` with
   * different versions (`@Workflow({ name: 'Orders.fulfil', version: 2 })`). An enqueue takes the highest version
   * registered in its process unless `EnqueueOptions.version` says otherwise. See docs/changing-workflows.md.
   */
  version?: number;
  /**
   * Former names of this workflow (a rename): runs recorded under one of them, at this method's version, run on
   * this method, and an enqueue by an old name enqueues this name.
   */
  aliases?: string[];
  /**
   * The workflow's default queue, declared in `forRoot({ queues })` or with `registerQueue()` (a boot error
   * otherwise): `QueueService.enqueue(workflow, args, options?)` without a queue name, and a `@Scheduled()` method or
   * `ScheduleService.create()` without `queue`, enqueue into it. A queue given explicitly always wins.
   */
  queue?: string;
  /**
   * How many times the workflow runs before a thrown error ends it as ERROR. Default 1 (no retries). Between
   * attempts it waits ENQUEUED (holding its deduplication ID) for the backoff; completed steps are not run again.
   */
  maxAttempts?: number;
  /** The wait between attempts. */
  backoff?: BackoffOptions;
  /**
   * How many times the workflow may be recovered after its process died before it is dead-lettered as
   * `MAX_RECOVERY_ATTEMPTS_EXCEEDED`. Default: the module's `maxRecoveryAttempts`.
   */
  maxRecoveryAttempts?: number;
  /**
   * `'thread'`: the body runs in a worker thread of the module's pool (`forRoot({ isolation })`), so that CPU-bound
   * work leaves the process's event loop free (HTTP answers, heartbeats keep the lease), a cancel, timeout or
   * supersede stops it even when it ignores its signal (its thread is terminated), and a body past
   * `isolation.resourceLimits` fails its attempt instead of the process. Arguments and the result cross as JSON; steps,
   * `sleep`, `recv`, `setEvent`, `QueueService` and the logger work inside as in any other body. The class must be
   * exported from its own file, which the thread loads. See docs/isolation.md.
   */
  isolate?: 'thread';
  /**
   * With `isolate: 'thread'`, the module the thread builds (as a Nest application context) to make this workflow's
   * provider, when its constructor needs more than `QueueService`, `ScheduleService` and `@InjectQueue()` queues
   * (which every thread provides). Given as a function, `() => ReportsThreadModule`, since that module usually lists
   * this class among its providers. It must provide the class, and must not import `DedupQueueModule.forRoot()`.
   */
  threadModule?: () => Type;
}
