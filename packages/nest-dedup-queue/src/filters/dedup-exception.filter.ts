import { ArgumentsHost, Catch, ExceptionFilter, HttpStatus, Inject, Optional } from '@nestjs/common';
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
  /** Where the holder's status can be read, when the filter was given `location`. */
  location?: string;
}

/** Options of `DedupExceptionFilter`; provide them under `DEDUP_EXCEPTION_FILTER_OPTIONS` or pass them to `new`. */
export interface DedupExceptionFilterOptions {
  /**
   * Where the holder's status can be read, sent as the `Location` header (and `location` in the body), e.g.
   * `(error) => \`/workflows/${error.existingWorkflowId}\``. Default: none.
   */
  location?: (error: QueueDeduplicatedError) => string;
}

/** Injection token of `DedupExceptionFilterOptions`, for `APP_FILTER` / `useClass` registrations. */
export const DEDUP_EXCEPTION_FILTER_OPTIONS = 'DEDUP_EXCEPTION_FILTER_OPTIONS';

/**
 * Answers a `QueueDeduplicatedError` with HTTP 409 Conflict and a JSON body naming the queue, the deduplication ID
 * and the workflow that holds it. Opt-in: apply it with `@UseFilters(DedupExceptionFilter)`,
 * `app.useGlobalFilters(new DedupExceptionFilter())` or an `APP_FILTER` provider. Works on Express and Fastify.
 */
@Catch(QueueDeduplicatedError)
export class DedupExceptionFilter implements ExceptionFilter<QueueDeduplicatedError> {
  constructor(
    @Optional() @Inject(DEDUP_EXCEPTION_FILTER_OPTIONS) private readonly options: DedupExceptionFilterOptions = {},
    @Optional() private readonly adapterHost?: HttpAdapterHost,
  ) {}

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
    const location = this.options?.location?.(error);
    if (location) {
      body.location = location;
      setHeader(response, 'Location', location);
    }
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

function setHeader(response: any, name: string, value: string): void {
  if (typeof response.setHeader === 'function') response.setHeader(name, value);
  else if (typeof response.header === 'function') response.header(name, value);
}
