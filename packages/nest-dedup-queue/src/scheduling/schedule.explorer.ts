import { Injectable, OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { DedupQueueConfig } from '../dedup-queue.config';
import { SCHEDULED_METADATA, WORKFLOW_METADATA } from '../dedup-queue.constants';
import type { ScheduledMetadata } from '../decorators/scheduled.decorator';
import type { WorkflowMetadata } from '../interfaces/workflow-metadata.interface';
import { QueueDatabase } from '../database/connection/queue-database';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import { ScheduleDefinition, scheduleQueue, validateSchedule } from './schedule-definition';
import { ScheduleStore } from './schedule.store';
import { findDecoratedMethods } from '../discovery/decorated-methods';

/**
 * Finds the `@Scheduled()` methods of the application's providers, validates them (a boot error says what to
 * change) and stores their definitions, keeping each schedule's pause flag and catch-up cursor. The methods
 * themselves are registered as workflows by the workflow explorer (`@Scheduled` marks them as workflows).
 */
@Injectable()
export class ScheduleExplorer implements OnModuleInit {
  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly config: DedupQueueConfig,
    private readonly store: ScheduleStore,
    private readonly database: QueueDatabase,
  ) {}

  async onModuleInit(): Promise<void> {
    try {
      const definitions = new Map<string, { definition: ScheduleDefinition; declaredAt: string }>();
      for (const { declaredAt, metadata, workflowName, workflowQueue } of this.scheduledMethods()) {
        const definition = this.define(declaredAt, metadata, workflowName, workflowQueue);
        const existing = definitions.get(definition.name);
        if (existing) {
          throw new DedupQueueConfigurationError(
            `Two schedules are named "${definition.name}" (${existing.declaredAt} and ${declaredAt}); ` +
              `give one of them another name with @Scheduled(cron, { name: '...' })`,
          );
        }
        definitions.set(definition.name, { definition, declaredAt });
      }
      for (const { definition } of definitions.values()) await this.store.upsert(definition);
    } catch (error) {
      // NOTE: a failed boot runs no shutdown hooks; close the pool here or it keeps the process alive.
      await this.database.close();
      throw error;
    }
  }

  private scheduledMethods(): Array<{
    declaredAt: string;
    metadata: ScheduledMetadata;
    workflowName: string;
    workflowQueue?: string;
  }> {
    const methods = findDecoratedMethods<ScheduledMetadata>(
      this.discovery,
      this.scanner,
      SCHEDULED_METADATA,
      '@Scheduled()',
      'schedules run outside any request',
    );
    return methods.map(({ instance, methodName, metadata, declaredAt }) => {
      const workflow = Reflect.getMetadata(WORKFLOW_METADATA, instance[methodName]) as WorkflowMetadata;
      return { declaredAt, metadata, workflowName: workflow.name, workflowQueue: workflow.options.queue };
    });
  }

  private define(
    declaredAt: string,
    { cron, options }: ScheduledMetadata,
    workflowName: string,
    workflowQueue: string | undefined,
  ): ScheduleDefinition {
    const fail = (field: string, reason: string): never => {
      const option = field === 'cron' ? 'cron' : `options.${field}`;
      throw new DedupQueueConfigurationError(`${declaredAt}: @Scheduled() ${option} ${reason}`);
    };
    if (options === null || typeof options !== 'object') fail('options', 'must be an object');
    const valid = validateSchedule({ ...options, name: options.name ?? declaredAt, cron }, fail);
    return {
      name: valid.name,
      source: 'decorator',
      cron: valid.cron,
      timezone: valid.timezone,
      workflowName,
      queueName: scheduleQueue(this.config.queues.keys(), options.queue, fail, workflowQueue),
      argsJson: '[]',
      catchUp: valid.catchUp,
      catchUpLimit: valid.catchUpLimit,
      overlap: valid.overlap,
    };
  }
}
