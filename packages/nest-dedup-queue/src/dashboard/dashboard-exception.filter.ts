import { ArgumentsHost, Catch, ExceptionFilter, HttpStatus } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { DedupQueueError } from '../errors/dedup-queue.error';
import { UnknownQueueError } from '../errors/unknown-queue.error';
import { DedupExceptionFilter } from '../filters/dedup-exception.filter';

/**
 * The dashboard API's answers to the `DedupQueueError` family: those of `DedupExceptionFilter` (409, 400, 404, 503,
 * 500), plus `UnknownQueueError` as 404, since here the queue is part of the URL.
 */
@Catch(DedupQueueError)
export class DashboardExceptionFilter implements ExceptionFilter<DedupQueueError> {
  private readonly family: DedupExceptionFilter;

  constructor(private readonly adapterHost: HttpAdapterHost) {
    this.family = new DedupExceptionFilter({}, adapterHost);
  }

  catch(error: DedupQueueError, host: ArgumentsHost): void {
    if (!(error instanceof UnknownQueueError)) return this.family.catch(error, host);
    const body = { statusCode: HttpStatus.NOT_FOUND, error: 'Not Found', message: error.message };
    this.adapterHost.httpAdapter.reply(host.switchToHttp().getResponse(), body, HttpStatus.NOT_FOUND);
  }
}
