import { Injectable } from '@nestjs/common';
import type { ScheduleInfo } from '../interfaces/schedule-options.interface';
import { ScheduleService } from '../scheduling/schedule.service';
import type { DashboardSchedule } from './dashboard-api.interface';

/** The dashboard's schedules: read and acted on through `ScheduleService`, as the application itself would. */
@Injectable()
export class DashboardSchedulesService {
  constructor(private readonly schedules: ScheduleService) {}

  /** Every schedule, by name. */
  async list(): Promise<DashboardSchedule[]> {
    return (await this.schedules.list()).map(toDashboardSchedule);
  }

  /** Pauses or resumes one schedule and answers with it. @throws ScheduleNotFoundError */
  async setPaused(name: string, paused: boolean): Promise<DashboardSchedule> {
    await (paused ? this.schedules.pause(name) : this.schedules.resume(name));
    return toDashboardSchedule(await this.schedules.get(name));
  }

  /** Runs one schedule's workflow now. @throws ScheduleNotFoundError */
  async trigger(name: string): Promise<{ name: string; workflowId: string }> {
    return { name, workflowId: (await this.schedules.trigger(name)).workflowId };
  }
}

function toDashboardSchedule(schedule: ScheduleInfo): DashboardSchedule {
  return {
    name: schedule.name,
    cron: schedule.cron,
    timezone: schedule.timezone,
    source: schedule.source,
    workflowName: schedule.workflowName,
    queueName: schedule.queueName,
    paused: schedule.paused,
    nextRunAt: schedule.nextRunAt?.toISOString() ?? null,
    lastRunAt: schedule.lastRunAt?.toISOString() ?? null,
    lastWorkflowId: schedule.lastWorkflowId,
  };
}
