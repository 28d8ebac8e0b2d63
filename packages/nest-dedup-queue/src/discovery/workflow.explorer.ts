import { Injectable, OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { WORKFLOW_METADATA } from '../dedup-queue.constants';
import type { WorkflowMetadata } from '../decorators/workflow.decorator';
import { QueueDatabase } from '../database/queue-database';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import { WorkflowRegistry } from './workflow.registry';

type InstanceWrapper = ReturnType<DiscoveryService['getProviders']>[number];

/** Finds the `@Workflow()` methods of the application's providers and registers them, bound to their instance. */
@Injectable()
export class WorkflowExplorer implements OnModuleInit {
  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly registry: WorkflowRegistry,
    private readonly database: QueueDatabase,
  ) {}

  async onModuleInit(): Promise<void> {
    try {
      for (const wrapper of this.discovery.getProviders()) {
        this.explore(wrapper);
      }
    } catch (error) {
      // NOTE: a failed boot runs no shutdown hooks; close the pool here or it keeps the process alive.
      await this.database.close();
      throw error;
    }
  }

  private explore(wrapper: InstanceWrapper): void {
    if (wrapper.isAlias || !wrapper.metatype || typeof wrapper.metatype !== 'function') {
      return;
    }
    const prototype = wrapper.metatype.prototype as object | undefined;
    if (!prototype) {
      return;
    }
    const workflowMethods = this.scanner
      .getAllMethodNames(prototype)
      .map((methodName) => ({ methodName, metadata: this.metadataOf(prototype, methodName) }))
      .filter((found): found is { methodName: string; metadata: WorkflowMetadata } => !!found.metadata);
    if (workflowMethods.length === 0) {
      return;
    }
    const className = wrapper.metatype.name;
    if (!wrapper.isDependencyTreeStatic()) {
      throw new DedupQueueConfigurationError(
        `${className} has @Workflow() methods but is request-scoped (or depends on a request-scoped provider); ` +
          `workflows run outside any request, so make ${className} a singleton (the default scope)`,
      );
    }
    const instance = wrapper.instance as Record<string, (...args: unknown[]) => unknown> | undefined;
    if (!instance) {
      return;
    }
    for (const { methodName, metadata } of workflowMethods) {
      const method = instance[methodName];
      this.registry.register({
        name: metadata.name,
        options: metadata.options,
        declaredAt: `${className}.${methodName}`,
        run: async (args) => method.apply(instance, args),
      });
    }
  }

  private metadataOf(prototype: object, methodName: string): WorkflowMetadata | undefined {
    const method = (prototype as Record<string, unknown>)[methodName];
    return typeof method === 'function' ? Reflect.getMetadata(WORKFLOW_METADATA, method) : undefined;
  }
}
