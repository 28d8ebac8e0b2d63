import { CronTime } from 'cron';

/** How far back `latestTicks` looks before it gives up, past the cursor or not. */
const MAX_LOOKBACK_MS = 10 * 366 * 24 * 60 * 60 * 1000;
/** At most this many ticks are ever computed for one call (a guard against a cursor left far behind). */
const MAX_TICKS = 10_000;

/**
 * The ticks of one cron expression in one time zone, computed by the `cron` package's `CronTime` (the parser and
 * calendar `@nestjs/schedule` uses, so the syntax and the DST behaviour are the same). Pure: it never reads a clock
 * except through the instants it is given.
 */
export class TickCalculator {
  private readonly cronTime: CronTime;

  /** @throws the `cron` package's error when the expression or the time zone is not valid */
  constructor(
    readonly cron: string,
    readonly timezone: string | null,
  ) {
    this.cronTime = new CronTime(cron, timezone ?? 'UTC');
  }

  /** The first tick strictly after `instant`, or undefined when there is none in the cron package's horizon. */
  nextAfter(instant: Date): Date | undefined {
    try {
      return this.cronTime.getNextDateFrom(instant, this.timezone ?? 'UTC').toJSDate();
    } catch {
      return undefined;
    }
  }

  /** The ticks in (`after`, `upTo`], oldest first; at most the `limit` most recent of them. */
  ticksBetween(after: Date, upTo: Date, limit = MAX_TICKS): Date[] {
    if (upTo <= after || limit <= 0) return [];
    let ticks = this.walk(after, upTo, MAX_TICKS + 1);
    if (ticks.length > MAX_TICKS) ticks = this.latestTicks(after, upTo, limit);
    return ticks.slice(-limit);
  }

  /**
   * The `count` most recent ticks in (`after`, `upTo`], oldest first, found by looking back over windows that
   * double in length, so a cursor far in the past does not walk every tick since.
   */
  latestTicks(after: Date, upTo: Date, count: number): Date[] {
    if (upTo <= after || count <= 0) return [];
    for (let windowMs = 1000; ; windowMs *= 2) {
      const from = new Date(Math.max(after.getTime(), upTo.getTime() - windowMs));
      const ticks = this.walk(from, upTo, MAX_TICKS);
      const reachedCursor = from.getTime() === after.getTime() || windowMs > MAX_LOOKBACK_MS;
      if (ticks.length >= count || reachedCursor) return ticks.slice(-count);
    }
  }

  private walk(after: Date, upTo: Date, limit: number): Date[] {
    const ticks: Date[] = [];
    let next = this.nextAfter(after);
    while (next && next <= upTo && ticks.length < limit) {
      ticks.push(next);
      next = this.nextAfter(next);
    }
    return ticks;
  }
}
