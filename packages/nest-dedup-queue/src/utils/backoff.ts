import type { BackoffOptions } from '../interfaces/backoff-options.interface';

/** The wait before attempt `attempt + 1`, after `attempt` failed ones. */
export function backoffDelayMs(attempt: number, options: BackoffOptions = {}): number {
  const { initialDelayMs = 1000, multiplier = 2, maxDelayMs = 60_000, jitter = true } = options;
  const delay = Math.min(maxDelayMs, initialDelayMs * multiplier ** Math.max(0, attempt - 1));
  return Math.round(jitter ? delay * (0.5 + Math.random() * 0.5) : delay);
}

/** Waits `ms`, or rejects with the signal's reason as soon as it aborts. */
export function abortableDelay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason as Error);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason as Error);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
