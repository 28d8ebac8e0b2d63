import { ArgumentsHost, Catch, ExceptionFilter, HttpStatus, Optional } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { QueueDeduplicatedError } from '../errors/queue-deduplicated.error';

/** The JSON body `DedupExceptionFilter` answers with. */
export interface DeduplicatedResponseBody {
  statusCode: 409;
  error: 'Conflict';
  message: string;
  queueName: string;
  deduplicationId: string;
  existingWorkflowId: string;
}

/**
 * Answers a `QueueDeduplicatedError` with HTTP 409 Conflict and a JSON body naming the queue, the deduplication ID
 * and the workflow that holds it. Opt-in: apply it with `@UseFilters(DedupExceptionFilter)`,
 * `app.useGlobalFilters(new DedupExceptionFilter())` or an `APP_FILTER` provider. Works on Express and Fastify.
 */
@Catch(QueueDeduplicatedError)
export class DedupExceptionFilter implements ExceptionFilter<QueueDeduplicatedError> {
  constructor(@Optional() private readonly adapterHost?: HttpAdapterHost) {}

  catch(error: QueueDeduplicatedError, host: ArgumentsHost): void {
    const response = host.switchToHttp().getResponse();
    const body: DeduplicatedResponseBody = {
      statusCode: HttpStatus.CONFLICT,
      error: 'Conflict',
      message: error.message,
      queueName: error.queueName,
      deduplicationId: error.deduplicationId,
      existingWorkflowId: error.existingWorkflowId,
    };
    const adapter = this.adapterHost?.httpAdapter;
    if (adapter) {
      adapter.reply(response, body, HttpStatus.CONFLICT);
    } else if (typeof response.status === 'function' && typeof response.json === 'function') {
      response.status(HttpStatus.CONFLICT).json(body);
    } else {
      response.code(HttpStatus.CONFLICT).header('content-type', 'application/json; charset=utf-8').send(body);
    }
  }
}
