import { ArgumentsHost, Catch, ExceptionFilter, HttpStatus } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { DatabaseUnavailableError } from '../errors/database-unavailable.error';
import { DedupQueueError } from '../errors/dedup-queue.error';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { QueueDeduplicatedError } from '../errors/queue-deduplicated.error';
import { UnknownQueueError } from '../errors/unknown-queue.error';
import { WorkflowNotFoundError } from '../errors/workflow-not-found.error';
import { DedupExceptionFilter } from '../filters/dedup-exception.filter';

/**
 * The dashboard API's answers to the `DedupQueueError` family: `QueueDeduplicatedError` 409 (by
 * `DedupExceptionFilter`), `InvalidArgumentError` 400, `WorkflowNotFoundError` and `UnknownQueueError` 404,
 * `DatabaseUnavailableError` 503 with `Retry-After`, any other 500. Bodies carry the message, never a stack.
 */
@Catch(DedupQueueError)
export class DashboardExceptionFilter implements ExceptionFilter<DedupQueueError> {
  private readonly conflicts: DedupExceptionFilter;

  constructor(private readonly adapterHost: HttpAdapterHost) {
    this.conflicts = new DedupExceptionFilter({}, adapterHost);
  }

  catch(error: DedupQueueError, host: ArgumentsHost): void {
    if (error instanceof QueueDeduplicatedError) return this.conflicts.catch(error, host);
    const adapter = this.adapterHost.httpAdapter;
    const response = host.switchToHttp().getResponse();
    const statusCode = statusOf(error);
    const body: Record<string, unknown> = { statusCode, error: error.name, message: error.message };
    if (error instanceof InvalidArgumentError) body.field = error.field;
    if (error instanceof DatabaseUnavailableError) {
      adapter.setHeader(response, 'Retry-After', String(error.retryAfterSeconds));
    }
    adapter.reply(response, body, statusCode);
  }
}

function statusOf(error: DedupQueueError): number {
  if (error instanceof InvalidArgumentError) return HttpStatus.BAD_REQUEST;
  if (error instanceof WorkflowNotFoundError || error instanceof UnknownQueueError) return HttpStatus.NOT_FOUND;
  if (error instanceof DatabaseUnavailableError) return HttpStatus.SERVICE_UNAVAILABLE;
  return HttpStatus.INTERNAL_SERVER_ERROR;
}
