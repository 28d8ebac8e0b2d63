import { SCHEDULED_METADATA, WORKFLOW_METADATA } from '../dedup-queue.constants';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import type { ScheduledOptions } from '../interfaces/schedule-options.interface';
import type { WorkflowMetadata } from '../interfaces/workflow-metadata.interface';

/** What `@Scheduled()` records on the decorated method. */
export interface ScheduledMetadata {
  cron: string;
  options: ScheduledOptions;
}

/**
 * Runs a method of a singleton provider on a cron schedule, **once per tick across every process** that shares the
 * database, durably: the method is a workflow (with `@Workflow()`'s retries, steps and timeouts; stack
 * `@Workflow({ ... })` on it for options), and each tick enqueues one run whose ID is `sched:<name>:<tick ISO time>`,
 * so the database decides which process's tick counts. The run never starts before the tick's time by the
 * database's clock. The method is called with the tick's scheduled time (a `Date`) as its first argument.
 *
 * @param cron 5 fields, or 6 with seconds first, with the syntax of `@nestjs/schedule`'s `@Cron` (the `cron`
 *   package), or a preset such as `'@daily'`; read in `options.timezone` (default UTC)
 * @param options `name`, `queue`, `timezone`, `catchUp`, `catchUpLimit`, `overlap` (see `ScheduledOptions`)
 *
 * @example
 * ```ts
 * @Injectable()
 * export class Reports {
 *   @Scheduled('30 2 * * *', { timezone: 'Europe/Berlin', catchUp: 'latest' })
 *   async nightly(tick: Date) { ... }        // schedule and workflow 'Reports.nightly'
 * }
 * ```
 */
export function Scheduled(cron: string, options: ScheduledOptions = {}): MethodDecorator {
  return (target, propertyKey, descriptor) => {
    const declaredAt = `${target.constructor.name}.${String(propertyKey)}`;
    const original = descriptor.value as unknown as (...args: unknown[]) => unknown;
    if (typeof original !== 'function') {
      throw new DedupQueueConfigurationError(`${declaredAt}: @Scheduled() goes on a method`);
    }
    if (Reflect.getMetadata(SCHEDULED_METADATA, original)) {
      throw new DedupQueueConfigurationError(
        `${declaredAt} has two @Scheduled() decorators; declare one method per schedule, ` +
          'or add more schedules with ScheduleService.create()',
      );
    }
    // NOTE: stored arguments are JSON, so the tick arrives as an ISO string; the wrapper hands the method a Date.
    const withTickDate = function (this: unknown, tick: unknown, ...rest: unknown[]) {
      return original.call(this, typeof tick === 'string' ? new Date(tick) : tick, ...rest);
    };
    Object.defineProperty(withTickDate, 'name', { value: original.name });
    for (const key of Reflect.getMetadataKeys(original)) {
      Reflect.defineMetadata(key, Reflect.getMetadata(key, original), withTickDate);
    }
    if (!Reflect.getMetadata(WORKFLOW_METADATA, withTickDate)) {
      const workflow: WorkflowMetadata = { name: declaredAt, options: {} };
      Reflect.defineMetadata(WORKFLOW_METADATA, workflow, withTickDate);
    }
    const metadata: ScheduledMetadata = { cron, options };
    Reflect.defineMetadata(SCHEDULED_METADATA, metadata, withTickDate);
    descriptor.value = withTickDate as unknown as typeof descriptor.value;
    return descriptor;
  };
}
