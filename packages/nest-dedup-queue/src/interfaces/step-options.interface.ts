import type { BackoffOptions } from './backoff-options.interface';

/** Options of `@Step()` and `runStep()`. */
export interface StepOptions {
  /** The recorded name, checked on replay. Default `ClassName.methodName` for `@Step()`. */
  name?: string;
  /** How many times to run the step before its error is recorded and thrown. Default 1 (no retries). */
  maxAttempts?: number;
  /** The wait between attempts. */
  backoff?: BackoffOptions;
  /**
   * Run the step in a database transaction that also records its checkpoint, so its writes through
   * `stepManager()` commit exactly once. Default false.
   */
  transactional?: boolean;
}
