import { Controller, Get, Header } from '@nestjs/common';
import { register } from 'prom-client';

/** `GET /metrics`: the Prometheus metrics of prom-client's default registry, where `metrics: true` puts the queue's. */
@Controller('metrics')
export class MetricsController {
  @Get()
  @Header('Content-Type', register.contentType)
  metrics(): Promise<string> {
    return register.metrics();
  }
}
