import {
  Body,
  CanActivate,
  Controller,
  Get,
  Header,
  Headers,
  HttpCode,
  Param,
  Patch,
  Post,
  Query,
  Type,
  UseFilters,
  UseGuards,
} from '@nestjs/common';
import { ActionHeaders, assertDashboardAction } from './dashboard-action.check';
import type { DashboardPage } from './dashboard-page';
import { DashboardExceptionFilter } from './dashboard-exception.filter';
import { DashboardSchedulesService } from './dashboard-schedules.service';
import { DashboardService } from './dashboard.service';

/**
 * Makes the dashboard's controller for one `forRoot()` call: a class of its own, so that its path and guards are
 * metadata of that class alone (several apps, or dashboards, in one process never share them). Every action checks
 * where it comes from (`assertDashboardAction`).
 */
export function createDashboardController(
  path: string,
  guards: Type<CanActivate>[],
  page: DashboardPage,
  allowedOrigins: ReadonlySet<string>,
): Type<unknown> {
  @Controller(path)
  @UseGuards(...guards)
  @UseFilters(DashboardExceptionFilter)
  class DedupQueueDashboardController {
    constructor(
      private readonly dashboard: DashboardService,
      private readonly schedules: DashboardSchedulesService,
    ) {}

    @Get()
    @Header('Content-Type', 'text/html; charset=utf-8')
    @Header('Cache-Control', 'no-store')
    @Header('Content-Security-Policy', page.contentSecurityPolicy)
    @Header('X-Content-Type-Options', 'nosniff')
    page(): string {
      return page.html;
    }

    @Get('api/queues')
    @Header('Cache-Control', 'no-store')
    async queues() {
      return { queues: await this.dashboard.listQueues() };
    }

    @Post('api/queues/:name/pause')
    @HttpCode(200)
    pause(@Param('name') name: string, @Headers() headers: ActionHeaders) {
      assertDashboardAction(headers, allowedOrigins);
      return this.dashboard.setPaused(name, true);
    }

    @Post('api/queues/:name/resume')
    @HttpCode(200)
    resumeQueue(@Param('name') name: string, @Headers() headers: ActionHeaders) {
      assertDashboardAction(headers, allowedOrigins);
      return this.dashboard.setPaused(name, false);
    }

    @Patch('api/queues/:name/limits')
    limits(@Param('name') name: string, @Body() body: unknown, @Headers() headers: ActionHeaders) {
      assertDashboardAction(headers, allowedOrigins);
      return this.dashboard.setLimits(name, body);
    }

    @Get('api/schedules')
    @Header('Cache-Control', 'no-store')
    async scheduleList() {
      return { schedules: await this.schedules.list() };
    }

    @Post('api/schedules/:name/pause')
    @HttpCode(200)
    pauseSchedule(@Param('name') name: string, @Headers() headers: ActionHeaders) {
      assertDashboardAction(headers, allowedOrigins);
      return this.schedules.setPaused(name, true);
    }

    @Post('api/schedules/:name/resume')
    @HttpCode(200)
    resumeSchedule(@Param('name') name: string, @Headers() headers: ActionHeaders) {
      assertDashboardAction(headers, allowedOrigins);
      return this.schedules.setPaused(name, false);
    }

    @Post('api/schedules/:name/trigger')
    triggerSchedule(@Param('name') name: string, @Headers() headers: ActionHeaders) {
      assertDashboardAction(headers, allowedOrigins);
      return this.schedules.trigger(name);
    }

    @Get('api/workflows')
    @Header('Cache-Control', 'no-store')
    workflows(@Query() query: Record<string, unknown>) {
      return this.dashboard.listWorkflows(query);
    }

    @Get('api/workflows/:id')
    @Header('Cache-Control', 'no-store')
    workflow(@Param('id') id: string) {
      return this.dashboard.getWorkflow(id);
    }

    @Get('api/workflows/:id/streams/:key')
    @Header('Cache-Control', 'no-store')
    stream(@Param('id') id: string, @Param('key') key: string, @Query() query: Record<string, unknown>) {
      return this.dashboard.getStream(id, key, query);
    }

    @Post('api/workflows/cancel-matching')
    @HttpCode(200)
    cancelMatching(@Body() body: unknown, @Headers() headers: ActionHeaders) {
      assertDashboardAction(headers, allowedOrigins);
      return this.dashboard.cancelMatching(body);
    }

    @Post('api/workflows/resume-matching')
    @HttpCode(200)
    resumeMatching(@Body() body: unknown, @Headers() headers: ActionHeaders) {
      assertDashboardAction(headers, allowedOrigins);
      return this.dashboard.resumeMatching(body);
    }

    @Post('api/workflows/fork-matching')
    @HttpCode(200)
    forkMatching(@Body() body: unknown, @Headers() headers: ActionHeaders) {
      assertDashboardAction(headers, allowedOrigins);
      return this.dashboard.forkMatching(body);
    }

    @Get('api/versions')
    @Header('Cache-Control', 'no-store')
    versions() {
      return this.dashboard.versions();
    }

    @Post('api/workflows/:id/fork')
    fork(@Param('id') id: string, @Body() body: unknown, @Headers() headers: ActionHeaders) {
      assertDashboardAction(headers, allowedOrigins);
      return this.dashboard.fork(id, body);
    }

    @Post('api/workflows/:id/cancel')
    @HttpCode(200)
    cancel(@Param('id') id: string, @Headers() headers: ActionHeaders) {
      assertDashboardAction(headers, allowedOrigins);
      return this.dashboard.cancel(id);
    }

    @Post('api/workflows/:id/resume')
    @HttpCode(200)
    resume(@Param('id') id: string, @Headers() headers: ActionHeaders) {
      assertDashboardAction(headers, allowedOrigins);
      return this.dashboard.resume(id);
    }

    @Post('api/workflows/:id/rerun')
    rerun(@Param('id') id: string, @Headers() headers: ActionHeaders) {
      assertDashboardAction(headers, allowedOrigins);
      return this.dashboard.rerun(id);
    }

    @Post('api/workflows/:id/reschedule')
    @HttpCode(200)
    reschedule(@Param('id') id: string, @Body() body: unknown, @Headers() headers: ActionHeaders) {
      assertDashboardAction(headers, allowedOrigins);
      return this.dashboard.reschedule(id, body);
    }
  }
  return DedupQueueDashboardController;
}
