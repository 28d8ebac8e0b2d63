import { Injectable, OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { WORKFLOW_METADATA } from '../dedup-queue.constants';
import { QueueDatabase } from '../database/connection/queue-database';
import { WorkflowVersionStore } from '../database/versions/workflow-versions.store';
import type { WorkflowMetadata } from '../interfaces/workflow-metadata.interface';
import { findDecoratedMethods } from './decorated-methods';
import { IsolatedWorkflowCheck } from './isolated-workflow.check';
import { WorkflowRegistry } from './workflow.registry';

/**
 * Finds the `@Workflow()` methods of the application's providers (class, factory and value providers) and registers
 * them, bound to their instance; then checks that worker threads can run the isolated ones, and records their names
 * and versions in the database (`registered_workflows`).
 */
@Injectable()
export class WorkflowExplorer implements OnModuleInit {
  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly registry: WorkflowRegistry,
    private readonly database: QueueDatabase,
    private readonly versions: WorkflowVersionStore,
    private readonly isolation: IsolatedWorkflowCheck,
  ) {}

  async onModuleInit(): Promise<void> {
    try {
      const methods = findDecoratedMethods<WorkflowMetadata>(
        this.discovery,
        this.scanner,
        WORKFLOW_METADATA,
        '@Workflow()',
        'workflows run outside any request',
      );
      for (const { instance, methodName, metadata, className, declaredAt } of methods) {
        const method = instance[methodName];
        this.registry.register({
          name: metadata.name,
          options: metadata.options,
          declaredAt,
          run: async (args) => await method.apply(instance, args),
          isolated:
            metadata.declaredIn === undefined
              ? undefined
              : { file: metadata.declaredIn, className, methodName, workflowName: metadata.name },
        });
      }
      await this.isolation.verify(this.registry.isolated());
      await this.versions.recordRegistrations(this.registry.registrations());
      this.registry.markComplete();
    } catch (error) {
      // NOTE: a failed boot runs no shutdown hooks; close the pool here or it keeps the process alive.
      await this.database.close();
      throw error;
    }
  }
}
