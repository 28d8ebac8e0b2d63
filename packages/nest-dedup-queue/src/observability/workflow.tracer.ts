import { Injectable, OnApplicationShutdown } from '@nestjs/common';
import type * as OpenTelemetry from '@opentelemetry/api';
import type { NewWorkflow } from '../database/workflows/new-workflow';
import type { WorkflowOutcome } from '../database/workflows/finish/workflow-outcomes.store';
import { QueueDeduplicatedError } from '../errors/queue-deduplicated.error';
import { optionalPeer } from './optional-peer';
import type { WorkflowEvent } from '../interfaces/workflow-event.interface';
import { WorkflowLifecycle } from './workflow-lifecycle.events';

const TRACER_NAME = 'nest-dedup-queue';
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The span of one run, for the spans of its steps. */
export interface RunTrace {
  step<T>(name: string, body: () => Promise<T>): Promise<T>;
}

const UNTRACED_RUN: RunTrace = { step: (_name, body) => body() };

/** What a run span needs to know about the claimed workflow. */
export interface TracedRun {
  workflowId: string;
  workflowName: string;
  attempts: number;
  traceContext: string | null;
}

/**
 * OpenTelemetry spans for the queue, when the application installed `@opentelemetry/api` and registered a tracer
 * provider: a PRODUCER span `send <queue>` around each enqueue (its context stored with the workflow as a W3C
 * `traceparent`), a CONSUMER span `process <queue>` around each run, parented to that stored context wherever and
 * whenever the run happens, a child span per step, and a span event for each deduplication hit. Without a provider
 * the spans are non-recording and nothing else is done.
 */
@Injectable()
export class WorkflowTracer implements OnApplicationShutdown {
  private readonly unlisten: () => void;

  constructor(lifecycle: WorkflowLifecycle) {
    // NOTE: loaded at boot, so that the first enqueue and the first run do not wait for its modules to load.
    optionalPeer('@opentelemetry/api');
    this.unlisten = lifecycle.listen(
      (event) => {
        if (event.event === 'deduplicated') this.markDeduplicated(event);
      },
      ['deduplicated'],
    );
  }

  /** NOTE: after `beforeApplicationShutdown`, in which the workflows running at shutdown finish. */
  onApplicationShutdown(): void {
    this.unlisten();
  }

  /** Runs an enqueue of `workflows` (one, or a bulk enqueue) in a PRODUCER span, stamping its context on each row. */
  send<T>(queueName: string, workflows: NewWorkflow[], enqueue: () => Promise<T>): Promise<T> {
    const api = optionalPeer<typeof OpenTelemetry>('@opentelemetry/api');
    const tracer = api && registeredTracer(api);
    if (!api || !tracer) return enqueue();
    return this.sendTraced(api, tracer, queueName, workflows, enqueue);
  }

  private async sendTraced<T>(
    api: typeof OpenTelemetry,
    tracer: OpenTelemetry.Tracer,
    queueName: string,
    workflows: NewWorkflow[],
    enqueue: () => Promise<T>,
  ): Promise<T> {
    const span = tracer.startSpan(`send ${queueName}`, {
      kind: api.SpanKind.PRODUCER,
      attributes: {
        ...messagingAttributes(queueName, 'send'),
        ...(workflows.length === 1
          ? { 'messaging.message.id': workflows[0].workflowId, 'dedup_queue.workflow.name': workflows[0].workflowName }
          : { 'messaging.batch.message_count': workflows.length }),
      },
    });
    if (!span.isRecording()) return enqueue();
    const traceContext = toTraceparent(span.spanContext());
    for (const workflow of workflows) workflow.traceContext = traceContext;
    return this.within(api, span, api.trace.setSpan(api.context.active(), span), enqueue);
  }

  /**
   * Runs one run of a workflow in a CONSUMER span whose parent is the context its enqueue stored; an ERROR or RETRY
   * outcome is recorded on the span as an exception (a marker such as a suspended run's ends the span as it is).
   */
  process<R extends WorkflowOutcome | symbol>(
    queueName: string,
    run: TracedRun,
    body: (trace: RunTrace) => Promise<R>,
  ): Promise<R> {
    const api = optionalPeer<typeof OpenTelemetry>('@opentelemetry/api');
    const tracer = api && registeredTracer(api);
    if (!api || !tracer) return body(UNTRACED_RUN);
    return this.processTraced(api, tracer, queueName, run, body);
  }

  private async processTraced<R extends WorkflowOutcome | symbol>(
    api: typeof OpenTelemetry,
    tracer: OpenTelemetry.Tracer,
    queueName: string,
    run: TracedRun,
    body: (trace: RunTrace) => Promise<R>,
  ): Promise<R> {
    const parent = fromTraceparent(api, run.traceContext);
    const span = tracer.startSpan(
      `process ${queueName}`,
      {
        kind: api.SpanKind.CONSUMER,
        attributes: {
          ...messagingAttributes(queueName, 'process'),
          'messaging.message.id': run.workflowId,
          'dedup_queue.workflow.name': run.workflowName,
          'dedup_queue.attempt': run.attempts,
        },
      },
      parent,
    );
    if (!span.isRecording()) return body(UNTRACED_RUN);
    const runContext = api.trace.setSpan(parent, span);
    const trace: RunTrace = {
      step: (name, stepBody) => {
        const attributes = { 'dedup_queue.step.name': name };
        const stepSpan = tracer.startSpan(`step ${name}`, { attributes }, runContext);
        return this.within(api, stepSpan, api.trace.setSpan(runContext, stepSpan), stepBody);
      },
    };
    return this.within(api, span, runContext, async () => {
      const outcome = await body(trace);
      if (typeof outcome !== 'symbol' && outcome.error) {
        span.recordException({ name: outcome.error.name, message: outcome.error.message, stack: outcome.error.stack });
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: outcome.error.message });
        if (outcome.status === 'RETRY') span.setAttribute('dedup_queue.retry_delay_ms', outcome.retryDelayMs ?? 0);
      }
      return outcome;
    });
  }

  /** Runs `body` as the active span's work; a throw (other than a deduplication) is recorded; the span ends. */
  private async within<T>(
    api: typeof OpenTelemetry,
    span: OpenTelemetry.Span,
    context: OpenTelemetry.Context,
    body: () => Promise<T>,
  ): Promise<T> {
    try {
      return await api.context.with(context, body);
    } catch (error) {
      if (!(error instanceof QueueDeduplicatedError)) {
        span.recordException(error as Error);
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: (error as Error)?.message });
      }
      throw error;
    } finally {
      span.end();
    }
  }

  private markDeduplicated(event: WorkflowEvent): void {
    const api = optionalPeer<typeof OpenTelemetry>('@opentelemetry/api');
    api?.trace.getActiveSpan()?.addEvent('deduplicated', {
      'dedup_queue.deduplication_id': event.deduplicationId,
      'dedup_queue.existing_workflow_id': event.workflowId,
      'dedup_queue.deduplication_outcome': event.outcome,
    });
  }
}

/**
 * The tracer of the registered provider; undefined while none is registered, when every span would be the API's
 * non-recording one (so nothing is built for it).
 */
function registeredTracer(api: typeof OpenTelemetry): OpenTelemetry.Tracer | undefined {
  const provider = api.trace.getTracerProvider();
  return provider instanceof api.ProxyTracerProvider
    ? provider.getDelegateTracer(TRACER_NAME)
    : provider.getTracer(TRACER_NAME);
}

function messagingAttributes(queueName: string, operation: 'send' | 'process'): OpenTelemetry.Attributes {
  return {
    'messaging.system': 'nest-dedup-queue',
    'messaging.destination.name': queueName,
    'messaging.operation.type': operation,
    'messaging.operation.name': operation,
  };
}

function toTraceparent(context: OpenTelemetry.SpanContext): string {
  return `00-${context.traceId}-${context.spanId}-${(context.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

/** The stored enqueue context as a remote parent; a new trace (the root context) when there is none. */
function fromTraceparent(api: typeof OpenTelemetry, traceparent: string | null): OpenTelemetry.Context {
  const match = traceparent ? TRACEPARENT.exec(traceparent) : null;
  if (!match) return api.ROOT_CONTEXT;
  return api.trace.setSpanContext(api.ROOT_CONTEXT, {
    traceId: match[1],
    spanId: match[2],
    traceFlags: parseInt(match[3], 16),
    isRemote: true,
  });
}
