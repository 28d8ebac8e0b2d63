/**
 * What happens to the ticks that passed while no process was running the schedule (they are found when a process
 * starts):
 * - `'none'`: they are skipped; the schedule goes on with the next tick (the default);
 * - `'latest'`: the most recent of them runs once, at start;
 * - `'all'`: each of them runs once, oldest first, at most `catchUpLimit` of them (the most recent ones).
 */
export type ScheduleCatchUp = 'none' | 'latest' | 'all';

/** Options of the `@Scheduled(cron, options)` decorator. */
export interface ScheduledOptions {
  /** The schedule's name, unique among all schedules. Default `ClassName.methodName`. */
  name?: string;
  /**
   * The queue its runs go to. Default: the method's `@Workflow({ queue })`, else the module's only declared queue;
   * with several declared queues and no default queue it must be given (a boot error says so).
   */
  queue?: string;
  /** An IANA time zone the cron fields are read in, e.g. `'Europe/Berlin'`. Default UTC. */
  timezone?: string;
  /** What to do with ticks missed while no process ran. Default `'none'`. */
  catchUp?: ScheduleCatchUp;
  /** With `catchUp: 'all'`: at most this many missed ticks run (the most recent ones). Default 100. */
  catchUpLimit?: number;
  /**
   * Whether a tick starts a run while the previous run of the schedule is still enqueued or running. Default
   * `true`. With `false`, such a tick is skipped (as `@nestjs/schedule`'s `waitForCompletion`), in every process.
   */
  overlap?: boolean;
}

/** What `ScheduleService.create()` takes: a schedule for an existing workflow, stored in Postgres. */
export interface CreateScheduleOptions extends Omit<ScheduledOptions, 'name' | 'queue'> {
  /** The schedule's name, unique among all schedules (1 to 200 characters). */
  name: string;
  /** A cron expression in 5 fields, or 6 with seconds first, as `@nestjs/schedule` (the `cron` package) reads it. */
  cron: string;
  /** The `@Workflow()` method (`this.reports.send`) or its registered name (`'Reports.send'`). */
  workflow: ((...args: never[]) => unknown) | string;
  /** The queue its runs go to. Default: the workflow's `@Workflow({ queue })`, else the only declared queue. */
  queue?: string;
  /** The arguments each run gets, stored as JSON. Default `[]`. */
  args?: unknown[];
}

/** One schedule as `ScheduleService.list()` shows it. */
export interface ScheduleInfo {
  name: string;
  cron: string;
  /** The IANA time zone, or null for UTC. */
  timezone: string | null;
  /** `'decorator'` for `@Scheduled` methods, `'runtime'` for `ScheduleService.create()`. */
  source: 'decorator' | 'runtime';
  workflowName: string;
  queueName: string;
  catchUp: ScheduleCatchUp;
  overlap: boolean;
  paused: boolean;
  /** The next tick's scheduled time, or null while paused or when the cron has no future tick. */
  nextRunAt: Date | null;
  /** The scheduled time of the most recent run it enqueued (a tick's time, or the time of a `trigger`). */
  lastRunAt: Date | null;
  /** The workflow ID of that run, for `QueueService.retrieve()`. */
  lastWorkflowId: string | null;
}
