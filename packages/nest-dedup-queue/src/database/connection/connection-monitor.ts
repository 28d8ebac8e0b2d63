import { Logger } from '@nestjs/common';
import { describeError } from '../../utils/describe-error';

// NOTE: re-exported for the scheduler's imports; new code takes it from utils/describe-error.
export { describeError };

/** The lines an outage is told with. */
export interface OutageMessages {
  lost(reason: string): string;
  back(outageSeconds: string): string;
}

/** A loss within this long of the last logged one is logged only if it lasts. */
const QUIET_PERIOD_MS = 30_000;
/** How long a loss in the quiet period must last before it is logged anyway. */
const LASTING_OUTAGE_MS = 2_000;

/**
 * Follows whether a connection works, from the outcomes of the calls made on it, and logs each change of state
 * once: one warning when it is lost, one line with the outage's duration when it is back. A connection that flaps
 * (a storm of terminated backends) logs its first loss; later short losses in the next 30 s stay silent unless
 * one lasts longer than 2 s.
 */
export class ConnectionMonitor {
  private lostSince?: number;
  private lossLogged = false;
  private lastLossLoggedAt = -Infinity;

  constructor(
    private readonly logger: Logger,
    private readonly messages: OutageMessages,
    private readonly now: () => number = Date.now,
  ) {}

  /** Whether the last call succeeded (or none failed yet). */
  get reachable(): boolean {
    return this.lostSince === undefined;
  }

  /** When the current outage began (epoch ms), or undefined while reachable. */
  get unreachableSince(): number | undefined {
    return this.lostSince;
  }

  failed(error: unknown): void {
    const now = this.now();
    this.lostSince ??= now;
    if (this.lossLogged) return;
    if (now - this.lastLossLoggedAt >= QUIET_PERIOD_MS || now - this.lostSince >= LASTING_OUTAGE_MS) {
      this.logger.warn(this.messages.lost(describeError(error)));
      this.lossLogged = true;
      this.lastLossLoggedAt = now;
    }
  }

  succeeded(): void {
    if (this.lostSince === undefined) return;
    if (this.lossLogged) this.logger.log(this.messages.back(((this.now() - this.lostSince) / 1000).toFixed(1)));
    this.lostSince = undefined;
    this.lossLogged = false;
  }
}
