import { Injectable, Logger, OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { WORKFLOW_EVENT_METADATA } from '../dedup-queue.constants';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import type { WorkflowEvent, WorkflowEventName } from '../interfaces/workflow-event.interface';
import { LifecycleEvent, WorkflowLifecycle } from '../observability/workflow-lifecycle.events';

type InstanceWrapper = ReturnType<DiscoveryService['getProviders']>[number];
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
 * calls them, bound to their instance, for the workflow lifecycle events of this process.
 */
@Injectable()
export class WorkflowEventsExplorer implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('DedupQueue');
  private readonly handlers = new Map<string, { declaredAt: string; handle: Handler }[]>();
  private unlisten?: () => void;

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly lifecycle: WorkflowLifecycle,
  ) {}

  onModuleInit(): void {
    const seen = new Set<object>();
    for (const wrapper of this.discovery.getProviders()) this.explore(wrapper, seen);
    if (this.handlers.size > 0) this.unlisten = this.lifecycle.listen((event) => this.deliver(event));
  }

  onModuleDestroy(): void {
    this.unlisten?.();
  }

  private explore(wrapper: InstanceWrapper, seen: Set<object>): void {
    if (wrapper.isAlias) return;
    const instance = wrapper.instance as Record<string, unknown> | undefined;
    const prototype =
      instance && typeof instance === 'object'
        ? (Object.getPrototypeOf(instance) as object | null)
        : (wrapper.metatype as { prototype?: object } | undefined)?.prototype;
    if (!prototype || prototype === Object.prototype) return;
    const methods = this.scanner
      .getAllMethodNames(prototype)
      .map((methodName) => ({ methodName, events: this.eventsOf(prototype, methodName) }))
      .filter(({ events }) => events.length > 0);
    if (methods.length === 0) return;
    const className = (prototype.constructor as { name?: string } | undefined)?.name ?? String(wrapper.name);
    if (!wrapper.isDependencyTreeStatic()) {
      throw new DedupQueueConfigurationError(
        `${className} has @OnWorkflowEvent() methods but is request-scoped (or depends on a request-scoped ` +
          `provider); events happen outside any request, so make ${className} a singleton (the default scope)`,
      );
    }
    if (!instance || seen.has(instance)) return;
    seen.add(instance);
    for (const { methodName, events } of methods) {
      const declaredAt = `${className}.${methodName}`;
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
  }

  private eventsOf(prototype: object, methodName: string): string[] {
    const method = (prototype as Record<string, unknown>)[methodName];
    return typeof method === 'function' ? (Reflect.getMetadata(WORKFLOW_EVENT_METADATA, method) ?? []) : [];
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
