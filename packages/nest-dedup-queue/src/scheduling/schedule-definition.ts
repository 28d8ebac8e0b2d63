import type { ScheduleCatchUp } from '../interfaces/schedule-options.interface';
import { TickCalculator } from './tick.calculator';
import { exceedsCharacters } from '../utils/character-length';

export const DEFAULT_CATCH_UP_LIMIT = 100;
const MAX_CATCH_UP_LIMIT = 10_000;
const MAX_NAME_LENGTH = 200;
const CATCH_UP_POLICIES: readonly ScheduleCatchUp[] = ['none', 'latest', 'all'];

/** A schedule as it is stored and ticked, validated. */
export interface ScheduleDefinition {
  name: string;
  source: 'decorator' | 'runtime';
  cron: string;
  timezone: string | null;
  workflowName: string;
  queueName: string;
  /** The arguments of each run, serialised; decorator schedules have none (they get the tick's time). */
  argsJson: string;
  catchUp: ScheduleCatchUp;
  catchUpLimit: number;
  overlap: boolean;
}

export interface ScheduleInput {
  name: unknown;
  cron: unknown;
  timezone?: unknown;
  catchUp?: unknown;
  catchUpLimit?: unknown;
  overlap?: unknown;
}

/**
 * Checks a schedule's name, cron, time zone and catch-up options (the one rule for decorators and run-time
 * schedules); `fail` raises the caller's error type. Returns the calculator of its ticks.
 */
export function validateSchedule(
  input: ScheduleInput,
  fail: (field: string, reason: string) => never,
): Pick<ScheduleDefinition, 'name' | 'cron' | 'timezone' | 'catchUp' | 'catchUpLimit' | 'overlap'> & {
  ticks: TickCalculator;
} {
  const { name, cron, timezone, catchUp = 'none', catchUpLimit = DEFAULT_CATCH_UP_LIMIT, overlap = true } = input;
  if (typeof name !== 'string' || name.length === 0 || exceedsCharacters(name, MAX_NAME_LENGTH)) {
    fail('name', `must be a string of 1 to ${MAX_NAME_LENGTH} characters`);
  }
  if (name.includes(':')) {
    fail('name', `"${name}" must not contain ":" (it separates the parts of run IDs)`);
  }
  if (typeof cron !== 'string' || cron.trim().length === 0) {
    fail('cron', 'must be a cron expression in 5 or 6 fields (or a preset such as "@daily")');
  }
  if (timezone !== undefined && timezone !== null && (typeof timezone !== 'string' || timezone.length === 0)) {
    fail('timezone', 'must be an IANA time zone name such as "Europe/Berlin"');
  }
  if (!CATCH_UP_POLICIES.includes(catchUp as ScheduleCatchUp)) fail('catchUp', "must be 'none', 'latest' or 'all'");
  const limit = catchUpLimit as number;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_CATCH_UP_LIMIT) {
    fail('catchUpLimit', `must be an integer from 1 to ${MAX_CATCH_UP_LIMIT}`);
  }
  if (typeof overlap !== 'boolean') fail('overlap', 'must be true or false');
  const fields = cron.trim().split(/\s+/).length;
  if (!cron.trim().startsWith('@') && fields !== 5 && fields !== 6) {
    fail('cron', `"${String(cron)}" has ${fields} fields; give 5, or 6 with seconds first`);
  }
  let ticks: TickCalculator;
  try {
    ticks = new TickCalculator(cron.trim(), (timezone as string | undefined) ?? null);
  } catch (error) {
    const reason = (error as Error).message;
    if (/time ?zone/i.test(reason)) {
      fail('timezone', `"${String(timezone)}" is not an IANA time zone the cron package knows`);
    }
    fail('cron', `"${String(cron)}" is not a valid cron expression: ${reason}`);
  }
  if (!ticks.nextAfter(new Date())) fail('cron', `"${String(cron)}" has no tick in the next 8 years`);
  return {
    name,
    cron: ticks.cron,
    timezone: ticks.timezone,
    catchUp: catchUp as ScheduleCatchUp,
    catchUpLimit: catchUpLimit as number,
    overlap,
    ticks,
  };
}

/**
 * The queue of a schedule: the one given, which must be declared, or else the workflow's default queue
 * (`@Workflow({ queue })`, checked at boot), or else the module's only declared queue. `fail` raises the caller's
 * error type.
 */
export function scheduleQueue(
  declared: Iterable<string>,
  given: unknown,
  fail: (field: string, reason: string) => never,
  workflowQueue?: string,
): string {
  const names = [...declared];
  const shown = names.map((name) => `"${name}"`).join(', ');
  if (given === undefined) {
    if (workflowQueue !== undefined) return workflowQueue;
    if (names.length === 1) return names[0];
    fail('queue', `must be given when several queues are declared (${shown})`);
  }
  if (typeof given !== 'string' || !names.includes(given)) {
    fail('queue', `${JSON.stringify(given)} is not a declared queue (declared: ${shown})`);
  }
  return given;
}
