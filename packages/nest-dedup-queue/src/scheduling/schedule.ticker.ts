import { BeforeApplicationShutdown, Inject, Injectable, OnApplicationBootstrap } from '@nestjs/common';
import { DedupQueueConfig } from '../dedup-queue.config';
import { QueueDatabase } from '../database/connection/queue-database';
import { WorkflowRegistry } from '../discovery/workflow.registry';
import { SCHEDULE_CLOCK, ScheduleClock } from './schedule.clock';
import { ScheduleRow, ScheduleStore } from './schedule.store';
import { TickCalculator } from './tick.calculator';
import { TickEnqueuer } from './tick.enqueuer';
import { ModuleLogger } from '../utils/module-logger';

/** The longest a timer waits (Node timers overflow past 2^31 - 1 ms). */
const MAX_TIMER_MS = 60 * 60 * 1000;

interface TickedSchedule {
  row: ScheduleRow;
  ticks: TickCalculator;
  /** When its next tick is due by this process's clock (ms), or undefined when it has none. */
  dueAt?: number;
  /** Why it could not be ticked last time, while that lasts (logged once). */
  failing?: string;
}

/**
 * Ticks the stored schedules whose workflow this process has, worker or not (ticking only enqueues; a process
 * without the workflow, such as a web app without the provider, leaves them to the others): one timer armed for the
 * earliest due tick or the next re-read of the schedules table, whichever comes first. Each due schedule is handed to
 * the `TickEnqueuer`, whose transaction decides, in the database, whether this process's tick counts. Schedules are
 * re-read every `pollIntervalMs` (run-time schedules created or removed elsewhere) and at once after a change here.
 */
@Injectable()
export class ScheduleTicker implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new ModuleLogger('DedupQueueSchedules');
  private readonly schedules = new Map<string, TickedSchedule>();
  /** Ticks after this instant came while this process ran; earlier ones follow the catch-up policy. */
  private regularFrom = new Date(0);
  private nextRefreshAt = 0;
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private runAgain = false;
  private stopped = true;

  constructor(
    private readonly config: DedupQueueConfig,
    private readonly database: QueueDatabase,
    private readonly store: ScheduleStore,
    private readonly enqueuer: TickEnqueuer,
    private readonly registry: WorkflowRegistry,
    @Inject(SCHEDULE_CLOCK) private readonly clock: ScheduleClock,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    const [{ db_now: databaseNow }] = await this.database.query<{ db_now: Date }>('SELECT now() AS db_now');
    // NOTE: the earlier of the two clocks, so a process whose clock runs behind does not take due ticks for missed.
    this.regularFrom = new Date(Math.min(this.clock.now(), databaseNow.getTime()));
    this.stopped = false;
    await this.run(true);
    if (this.schedules.size > 0) {
      const names = [...this.schedules.keys()].map((name) => `"${name}"`).join(', ');
      this.logger.log(`Ticking ${this.schedules.size} schedule(s): ${names}`);
    }
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** Re-reads the schedules and ticks what is due now (after a change made in this process). */
  refreshNow(): Promise<void> {
    this.nextRefreshAt = 0;
    return this.run(false);
  }

  /** One pass: re-read the schedules when it is time, evaluate the due ones, arm the timer. Passes never overlap. */
  private run(initial: boolean): Promise<void> {
    if (this.stopped) return Promise.resolve();
    if (this.running) {
      this.runAgain = true;
      return this.running;
    }
    this.running = (async () => {
      do {
        this.runAgain = false;
        await this.pass(initial);
      } while (this.runAgain && !this.stopped);
    })().finally(() => {
      this.running = undefined;
      this.arm();
    });
    return this.running;
  }

  private async pass(initial: boolean): Promise<void> {
    clearTimeout(this.timer);
    const now = this.clock.now();
    if (now >= this.nextRefreshAt) {
      await this.refresh(initial);
      this.nextRefreshAt = now + this.config.pollIntervalMs;
    }
    const due = [...this.schedules.values()].filter(({ dueAt }) => dueAt !== undefined && dueAt <= now);
    await Promise.all(due.map((schedule) => this.evaluate(schedule, now)));
  }

  private async refresh(initial: boolean): Promise<void> {
    let rows: ScheduleRow[];
    try {
      rows = await this.store.list();
    } catch (error) {
      if (initial) throw error;
      return;
    }
    const seen = new Set<string>();
    for (const row of rows) {
      if (!this.registry.find(row.workflow_name)) continue;
      seen.add(row.name);
      const known = this.schedules.get(row.name);
      if (known && known.row.cron === row.cron && known.row.timezone === row.timezone) {
        known.row = row;
        continue;
      }
      let ticks: TickCalculator;
      try {
        ticks = new TickCalculator(row.cron, row.timezone);
      } catch (error) {
        if (!known?.failing) this.logger.warn(`Schedule "${row.name}" cannot tick: ${(error as Error).message}`);
        continue;
      }
      // A new (or changed) schedule is evaluated at once: catch-up, or a tick that came while it was loading.
      this.schedules.set(row.name, { row, ticks, dueAt: 0 });
      if (!initial) this.logger.log(`Schedule "${row.name}" (${row.cron}) is ticking here`);
    }
    for (const name of this.schedules.keys()) {
      if (!seen.has(name)) this.forget(name);
    }
  }

  private async evaluate(schedule: TickedSchedule, now: number): Promise<void> {
    const { name } = schedule.row;
    try {
      const outcome = await this.enqueuer.advance(name, schedule.ticks, new Date(now), this.regularFrom);
      if (outcome.removed) return this.forget(name);
      if (schedule.failing) this.logger.log(`Schedule "${name}" ticks again`);
      schedule.failing = undefined;
      if (outcome.caughtUp > 0) {
        const policy = schedule.row.catch_up;
        this.logger.log(`Schedule "${name}": ran ${outcome.caughtUp} missed tick(s) (catchUp: '${policy}')`);
      }
    } catch (error) {
      const reason = (error as Error).message;
      if (schedule.failing !== reason) {
        this.logger.warn(`Schedule "${name}" could not enqueue its tick here: ${reason}`);
      }
      schedule.failing = reason;
      // NOTE: the cursor did not move, so the next evaluation enqueues this tick late instead of losing it.
      schedule.dueAt = now + this.config.pollIntervalMs;
      return;
    }
    schedule.dueAt = schedule.ticks.nextAfter(new Date(now))?.getTime();
  }

  private forget(name: string): void {
    if (this.schedules.delete(name)) this.logger.log(`Schedule "${name}" was removed; it no longer ticks here`);
  }

  private arm(): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    const dueTimes = [...this.schedules.values()].flatMap(({ dueAt }) => (dueAt === undefined ? [] : [dueAt]));
    const wakeAt = Math.min(this.nextRefreshAt, ...dueTimes);
    const delay = Math.min(Math.max(wakeAt - this.clock.now(), 1), MAX_TIMER_MS);
    this.timer = setTimeout(() => void this.run(false), delay);
    this.timer.unref();
  }
}
