/** How long to wait between attempts: `initialDelayMs × multiplier^(attempt-1)`, capped at `maxDelayMs`, with jitter. */
export interface BackoffOptions {
  /** The wait before the second attempt. Default 1000. */
  initialDelayMs?: number;
  /** The growth per attempt. Default 2. */
  multiplier?: number;
  /** The longest wait. Default 60000. */
  maxDelayMs?: number;
  /** Randomise each wait between half and all of it, so that many retries do not fire in step. Default true. */
  jitter?: boolean;
}
