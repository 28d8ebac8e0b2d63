import type { BackoffOptions } from './backoff-options.interface';

/** Options of the `@Workflow()` decorator. */
export interface WorkflowOptions {
  /** The registered name. Default `ClassName.methodName`. Must be unique in the application. */
  name?: string;
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
}
