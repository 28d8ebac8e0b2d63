import { ArgumentsHost, Catch, ExceptionFilter, HttpStatus, Inject, Optional } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { DatabaseUnavailableError } from '../errors/database-unavailable.error';
import { DedupQueueError } from '../errors/dedup-queue.error';
import { DeduplicationMismatchError } from '../errors/deduplication-mismatch.error';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { QueueDeduplicatedError } from '../errors/queue-deduplicated.error';
import { WorkflowIdConflictError } from '../errors/workflow-id-conflict.error';
import { ScheduleNotFoundError } from '../errors/schedule-not-found.error';
import { WorkflowNotFoundError } from '../errors/workflow-not-found.error';
import type { WorkflowStatus } from '../interfaces/workflow-status.interface';
import { ModuleLogger, stackOf } from '../utils/module-logger';

/** The JSON body `DedupExceptionFilter` answers a duplicate with. */
export interface DeduplicatedResponseBody {
  statusCode: 409;
  error: 'Conflict';
  message: string;
  queueName: string;
  deduplicationId: string;
  existingWorkflowId: string;
  /** The holder's status when the enqueue was refused (`QueueDeduplicatedError.existingStatus`), when it was read. */
  existingStatus?: WorkflowStatus;
  /** When the holder is a finished workflow within its deduplication window: when the window ends (ISO 8601). */
  windowEndsAt?: string;
  /** Where the holder's status can be read, when the filter was given `location`. */
  location?: string;
}

/** The JSON body `DedupExceptionFilter` answers a `DeduplicationMismatchError` with (422). */
export interface DeduplicationMismatchResponseBody {
  statusCode: 422;
  error: 'Unprocessable Entity';
  message: string;
  queueName: string;
  deduplicationId: string;
  existingWorkflowId: string;
}

/** The JSON body of every other answer: `{ statusCode, error, message }`, plus `field` for a 400. */
export interface DedupQueueErrorResponseBody {
  statusCode: number;
  error: string;
  message: string;
  /** For `InvalidArgumentError`: the argument or option at fault. */
  field?: string;
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
 * Answers the errors of nest-dedup-queue (the `DedupQueueError` family) with an HTTP status:
 *
 * | error | status |
 * |---|---|
 * | `QueueDeduplicatedError` | 409, naming the queue, the deduplication ID, the holder and its state |
 * | `DeduplicationMismatchError` | 422, naming the queue, the deduplication ID and the holder |
 * | `WorkflowIdConflictError` | 409 |
 * | `InvalidArgumentError` | 400, naming the field |
 * | `WorkflowNotFoundError`, `ScheduleNotFoundError` | 404 |
 * | `DatabaseUnavailableError` | 503 with `Retry-After` |
 * | any other (configuration and programming errors) | 500, logged with its stack; the body says no more |
 *
 * Opt-in: apply it with `@UseFilters(DedupExceptionFilter)`, `app.useGlobalFilters(new DedupExceptionFilter())` or
 * an `APP_FILTER` provider. Works on Express and Fastify.
 */
@Catch(DedupQueueError)
export class DedupExceptionFilter implements ExceptionFilter<DedupQueueError> {
  private readonly logger = new ModuleLogger('DedupExceptionFilter');

  constructor(
    @Optional() @Inject(DEDUP_EXCEPTION_FILTER_OPTIONS) private readonly options: DedupExceptionFilterOptions = {},
    @Optional() private readonly adapterHost?: HttpAdapterHost,
  ) {}

  catch(error: DedupQueueError, host: ArgumentsHost): void {
    const response = host.switchToHttp().getResponse<HttpResponse>();
    if (error instanceof QueueDeduplicatedError) {
      const body: DeduplicatedResponseBody = {
        statusCode: HttpStatus.CONFLICT,
        error: 'Conflict',
        message: error.message,
        queueName: error.queueName,
        deduplicationId: error.deduplicationId,
        existingWorkflowId: error.existingWorkflowId,
        ...(error.existingStatus ? { existingStatus: error.existingStatus } : {}),
        ...(error.windowEndsAt ? { windowEndsAt: error.windowEndsAt.toISOString() } : {}),
      };
      const location = this.options?.location?.(error);
      if (location) {
        body.location = location;
        setHeader(response, 'Location', location);
      }
      return this.reply(response, body);
    }
    if (error instanceof DeduplicationMismatchError) {
      return this.reply(response, {
        statusCode: HttpStatus.UNPROCESSABLE_ENTITY,
        error: 'Unprocessable Entity',
        message: error.message,
        queueName: error.queueName,
        deduplicationId: error.deduplicationId,
        existingWorkflowId: error.existingWorkflowId,
      });
    }
    if (error instanceof DatabaseUnavailableError) {
      setHeader(response, 'Retry-After', String(error.retryAfterSeconds));
      return this.reply(response, {
        statusCode: HttpStatus.SERVICE_UNAVAILABLE,
        error: 'Service Unavailable',
        message: 'The queue database is unavailable; try again later',
      });
    }
    if (error instanceof InvalidArgumentError) {
      return this.reply(response, {
        statusCode: HttpStatus.BAD_REQUEST,
        error: 'Bad Request',
        message: error.message,
        field: error.field,
      });
    }
    if (error instanceof WorkflowNotFoundError || error instanceof ScheduleNotFoundError) {
      return this.reply(response, { statusCode: HttpStatus.NOT_FOUND, error: 'Not Found', message: error.message });
    }
    if (error instanceof WorkflowIdConflictError) {
      return this.reply(response, { statusCode: HttpStatus.CONFLICT, error: 'Conflict', message: error.message });
    }
    this.logger.error(error.message, stackOf(error));
    this.reply(response, {
      statusCode: HttpStatus.INTERNAL_SERVER_ERROR,
      error: 'Internal Server Error',
      message: 'Internal server error',
    });
  }

  private reply(
    response: HttpResponse,
    body: DeduplicatedResponseBody | DeduplicationMismatchResponseBody | DedupQueueErrorResponseBody,
  ): void {
    const adapter = this.adapterHost?.httpAdapter;
    if (adapter) {
      adapter.reply(response, body, body.statusCode);
    } else if (isExpressResponse(response)) {
      response.status(body.statusCode).json(body);
    } else {
      response.code(body.statusCode).header('content-type', 'application/json; charset=utf-8').send(body);
    }
  }
}

/** The parts of an Express response that the filter uses. */
interface ExpressResponse {
  status(code: number): { json(body: unknown): unknown };
  json(body: unknown): unknown;
  setHeader(name: string, value: string): unknown;
}

/** The parts of a Fastify reply that the filter uses. */
interface FastifyReply {
  code(code: number): FastifyReply;
  header(name: string, value: string): FastifyReply;
  send(body: unknown): unknown;
}

type HttpResponse = ExpressResponse | FastifyReply;

function isExpressResponse(response: HttpResponse): response is ExpressResponse {
  return (
    'status' in response &&
    typeof response.status === 'function' &&
    'json' in response &&
    typeof response.json === 'function'
  );
}

function setHeader(response: HttpResponse, name: string, value: string): void {
  if ('setHeader' in response && typeof response.setHeader === 'function') response.setHeader(name, value);
  else if ('header' in response && typeof response.header === 'function') response.header(name, value);
}
