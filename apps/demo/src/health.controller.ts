import { Controller, Get } from '@nestjs/common';
import { HealthCheck, HealthCheckResult, HealthCheckService } from '@nestjs/terminus';
import { DedupQueueHealthIndicator } from 'nest-dedup-queue';

/** `GET /health`: 200 while the queue's database answers and this process's workers and lease are fine, else 503. */
@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly queue: DedupQueueHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check(): Promise<HealthCheckResult> {
    return this.health.check([() => this.queue.isHealthy()]);
  }
}
