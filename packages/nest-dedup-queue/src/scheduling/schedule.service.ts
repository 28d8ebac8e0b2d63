import { Injectable } from '@nestjs/common';
import { DedupQueueConfig } from '../dedup-queue.config';
import { WorkflowRegistry } from '../discovery/workflow.registry';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { ScheduleNotFoundError } from '../errors/schedule-not-found.error';
import type { CreateScheduleOptions, ScheduleInfo } from '../interfaces/schedule-options.interface';
import type { EnqueuedWorkflowHandle } from '../interfaces/workflow-handle.interface';
import { QueueService } from '../queue.service';
import { serialiseArgs } from '../utils/enqueue-options.validation';
import { scheduleQueue, validateSchedule } from './schedule-definition';
import { ScheduleRow, ScheduleStore } from './schedule.store';
import { ScheduleTicker } from './schedule.ticker';
import { TickCalculator } from './tick.calculator';
import { TickEnqueuer } from './tick.enqueuer';

const invalid = (field: string, reason: string): never => {
  throw new InvalidArgumentError(field, reason);
};

/**
 * Manages schedules at run time: `@Scheduled()` methods and schedules created here alike, stored in Postgres, so a
 * change made in one process holds in every process at once (each process re-reads the schedules every
 * `pollIntervalMs` to tick new ones; pausing and removing take effect in the tick's own transaction).
 */
@Injectable()
export class ScheduleService {
  constructor(
    private readonly config: DedupQueueConfig,
    private readonly registry: WorkflowRegistry,
    private readonly store: ScheduleStore,
    private readonly enqueuer: TickEnqueuer,
    private readonly ticker: ScheduleTicker,
    private readonly queues: QueueService,
  ) {}

  /**
   * Creates a schedule for an existing workflow, or updates the one of this name (its pause flag and catch-up
   * cursor stay), so every replica may call it at startup. A new schedule has missed nothing: its first run is
   * its first tick from now. Each run gets `args` (the tick's time is in its workflow ID,
   * `sched:<name>:<tick ISO time>`).
   * @throws InvalidArgumentError for a bad name, cron, time zone, queue or option, or a name a `@Scheduled()`
   *   method's schedule has
   * @throws UnknownWorkflowError when `workflow` is not a workflow of this application
   */
  async create(options: CreateScheduleOptions): Promise<ScheduleInfo> {
    if (options === null || typeof options !== 'object') invalid('options', 'must be { name, cron, workflow, ... }');
    const valid = validateSchedule(options, invalid);
    const workflowName = this.registry.resolveName(options.workflow);
    const workflowQueue = this.registry.find(workflowName)?.options.queue;
    const queueName = scheduleQueue(this.config.queues.keys(), options.queue, invalid, workflowQueue);
    const argsJson = serialiseArgs(options.args ?? [], 'args', this.config.inputLimits);
    const stored = await this.store.upsert({
      name: valid.name,
      source: 'runtime',
      cron: valid.cron,
      timezone: valid.timezone,
      workflowName,
      queueName,
      argsJson,
      catchUp: valid.catchUp,
      catchUpLimit: valid.catchUpLimit,
      overlap: valid.overlap,
    });
    if (!stored) invalid('name', `"${valid.name}" is the name of a @Scheduled() method's schedule`);
    await this.ticker.refreshNow();
    return this.get(valid.name);
  }

  /** Stops the schedule's ticks in every process until `resume`; runs already started go on. */
  async pause(name: string): Promise<void> {
    if (!(await this.store.setPaused(this.checkName(name), true))) throw new ScheduleNotFoundError(name);
    await this.cancelFutureTicks(name);
  }

  /** Ticks again from now on; the ticks that passed while paused are not made up. */
  async resume(name: string): Promise<void> {
    if (!(await this.store.setPaused(this.checkName(name), false))) throw new ScheduleNotFoundError(name);
  }

  /**
   * Enqueues one run now (also while paused), outside the tick sequence: the catch-up cursor does not move. A
   * `@Scheduled()` method gets the trigger's time as its tick.
   * @throws QueueDeduplicatedError with `overlap: false` while the schedule's previous run is still going
   */
  async trigger<R = unknown>(name: string): Promise<EnqueuedWorkflowHandle<R>> {
    const handle = await this.enqueuer.trigger(this.checkName(name));
    if (!handle) throw new ScheduleNotFoundError(name);
    return handle as EnqueuedWorkflowHandle<R>;
  }

  /**
   * Deletes a schedule; runs already enqueued for past ticks still run. A `@Scheduled()` method's schedule comes
   * back when a process that declares it starts (pause it to stop it for good).
   */
  async remove(name: string): Promise<void> {
    if (!(await this.store.remove(this.checkName(name)))) throw new ScheduleNotFoundError(name);
    await this.cancelFutureTicks(name);
    await this.ticker.refreshNow();
  }

  /** Every schedule, by name: decorator and run-time ones, with their next tick and last run. */
  async list(): Promise<ScheduleInfo[]> {
    return (await this.store.list()).map(toInfo);
  }

  /** One schedule. @throws ScheduleNotFoundError when there is none of this name */
  async get(name: string): Promise<ScheduleInfo> {
    const row = await this.store.find(this.checkName(name));
    if (!row) throw new ScheduleNotFoundError(name);
    return toInfo(row);
  }

  private checkName(name: unknown): string {
    if (typeof name !== 'string' || name.length === 0) invalid('name', 'must be a non-empty string');
    return name as string;
  }

  private async cancelFutureTicks(name: string): Promise<void> {
    for (const workflowId of await this.store.futureTicks(name)) await this.queues.cancel(workflowId);
  }
}

function toInfo(row: ScheduleRow): ScheduleInfo {
  let nextRunAt: Date | null = null;
  if (!row.paused) {
    try {
      const after = row.ticked_through > row.db_now ? row.ticked_through : row.db_now;
      nextRunAt = new TickCalculator(row.cron, row.timezone).nextAfter(after) ?? null;
    } catch {
      nextRunAt = null;
    }
  }
  return {
    name: row.name,
    cron: row.cron,
    timezone: row.timezone,
    source: row.source,
    workflowName: row.workflow_name,
    queueName: row.queue_name,
    catchUp: row.catch_up,
    overlap: row.overlap,
    paused: row.paused,
    nextRunAt,
    lastRunAt: row.last_run_at,
    lastWorkflowId: row.last_workflow_id,
  };
}
