/**
 * The clock the schedule ticker reads to decide when a tick is due (milliseconds since the epoch). Internal: tests
 * replace it (`overrideProvider(SCHEDULE_CLOCK)`) to run a process whose clock is off; the database's clock, not
 * this one, decides when a run may start.
 */
export interface ScheduleClock {
  now(): number;
}

export const SCHEDULE_CLOCK = Symbol('dedup-queue:schedule-clock');

export const systemClock: ScheduleClock = { now: () => Date.now() };
