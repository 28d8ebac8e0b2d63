import { Injectable, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { WORKFLOW_EVENT_METADATA } from '../dedup-queue.constants';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import type { WorkflowEvent, WorkflowEventName } from '../interfaces/workflow-event.interface';
import { findDecoratedMethods } from '../discovery/decorated-methods';
import { LifecycleEvent, WorkflowLifecycle } from './workflow-lifecycle.events';
import { ModuleLogger } from '../utils/module-logger';

type Handler = (event: WorkflowEvent) => unknown;

const EVENT_NAMES: ReadonlySet<string> = new Set<WorkflowEventName>([
  'completed',
  'failed',
  'cancelled',
  'recovered',
  'dead-lettered',
  'deduplicated',
]);

/**
 * Finds the `@OnWorkflowEvent()` methods of the application's providers (class, factory and value providers) and
 * calls them, bound to their instance, for the workflow lifecycle events of this process. It listens until
 * `onApplicationShutdown`, after the scheduler's `beforeApplicationShutdown` has waited for the running workflows
 * and written their outcomes, so that the events of workflows that finish during a graceful shutdown are delivered.
 */
@Injectable()
export class WorkflowEventsExplorer implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new ModuleLogger('DedupQueue');
  private readonly handlers = new Map<string, { declaredAt: string; handle: Handler }[]>();
  private unlisten?: () => void;

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly lifecycle: WorkflowLifecycle,
  ) {}

  onModuleInit(): void {
    const methods = findDecoratedMethods<string[]>(
      this.discovery,
      this.scanner,
      WORKFLOW_EVENT_METADATA,
      '@OnWorkflowEvent()',
      'events happen outside any request',
    );
    for (const { instance, methodName, metadata: events, declaredAt } of methods) {
      for (const event of events) {
        if (!EVENT_NAMES.has(event)) {
          throw new DedupQueueConfigurationError(
            `@OnWorkflowEvent(${JSON.stringify(event)}) on ${declaredAt}: the event must be one of ` +
              [...EVENT_NAMES].join(', '),
          );
        }
        const method = instance[methodName] as Handler;
        const list = this.handlers.get(event) ?? [];
        list.push({ declaredAt, handle: (payload) => method.call(instance, payload) });
        this.handlers.set(event, list);
      }
    }
    if (this.handlers.size > 0) {
      this.unlisten = this.lifecycle.listen((event) => this.deliver(event), [
        ...this.handlers.keys(),
      ] as LifecycleEvent['event'][]);
    }
  }

  onApplicationShutdown(): void {
    this.unlisten?.();
  }

  private deliver(event: LifecycleEvent): void {
    const handlers = this.handlers.get(event.event);
    if (!handlers) return;
    for (const { declaredAt, handle } of handlers) {
      const failed = (error: unknown) => {
        const message = (error as Error)?.message ?? String(error);
        this.logger.error(`@OnWorkflowEvent('${event.event}') ${declaredAt} threw: ${message}`);
      };
      try {
        const result = handle({ ...(event as WorkflowEvent) });
        if (result instanceof Promise) result.catch(failed);
      } catch (error) {
        failed(error);
      }
    }
  }
}
