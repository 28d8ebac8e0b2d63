import { DynamicModule, FactoryProvider, Module } from '@nestjs/common';
import { DiscoveryModule, DiscoveryService } from '@nestjs/core';
import { DedupQueueConfig, resolveConfig } from './dedup-queue.config';
import { ConfigurableModuleClass, DEDUP_QUEUE_OPTIONS } from './dedup-queue.module-definition';
import { QueueDatabase } from './database/connection/queue-database';
import { createQueueDatabase } from './database/queue-database.factory';
import { QueueControlStore } from './database/queues/queue-control.store';
import { WorkflowOutcomeStore } from './database/workflows/finish/workflow-outcomes.store';
import { WorkflowControlStore } from './database/workflows/control/workflow-control.store';
import { WorkflowReadStore } from './database/workflows/reads/workflow-reads.store';
import { BulkControlStore } from './database/workflows/control/bulk-control.store';
import { HistoryPartitions } from './database/sweeps/history-partitions';
import { QueueSettings } from './queue-settings';
import { WorkflowInserter } from './database/workflows/enqueue/workflow-inserter';
import { KeyHolderStore } from './database/workflows/enqueue/key-holders.store';
import { DuplicatePolicyStore } from './database/workflows/enqueue/duplicate-policies.store';
import { DeduplicationEvents } from './enqueue/deduplication-events';
import { SupersededRuns } from './enqueue/superseded-runs';
import { WorkflowEnqueuer } from './enqueue/workflow-enqueuer';
import { WorkflowExplorer } from './discovery/workflow.explorer';
import { WorkflowRegistry } from './discovery/workflow.registry';
import type { DedupQueueModuleOptions } from './interfaces/dedup-queue-options.interface';
import type { QueueOptions } from './interfaces/queue-options.interface';
import { findQueueRegistrations } from './queues/queue-registration';
import { InjectedQueuesExplorer } from './queues/injected-queues.explorer';
import { DedupQueueRegistrationModule } from './queues/queue-registration.module';
import { DedupQueueHealthIndicator } from './reporting/dedup-queue.health-indicator';
import { QueueMetrics } from './reporting/queue.metrics';
import { WorkflowEventsExplorer } from './observability/workflow-events.explorer';
import { WorkflowLifecycle } from './observability/workflow-lifecycle.events';
import { WorkflowTracer } from './observability/workflow.tracer';
import { QueueService } from './queue.service';
import { EnqueueService } from './enqueue/enqueue.service';
import { WorkflowLookupService } from './lookup/workflow-lookup.service';
import { WorkflowControlService } from './control/workflow-control.service';
import { BulkControlService } from './control/bulk-control.service';
import { ForkService } from './control/fork.service';
import { ForkStore } from './database/workflows/control/fork.store';
import { QueueControlService } from './control/queue-control.service';
import { ChildWorkflows } from './child-workflows';
import { WorkflowEvents } from './composition/workflow-events';
import { ChildWorkflowStore } from './database/workflows/control/child-workflow.store';
import { WorkflowHandleFactory } from './workflow-handle.factory';
import { QueueScheduler } from './scheduler/queue.scheduler';
import { ExecutorStore } from './database/executors/executor.store';
import { WorkflowVersionStore } from './database/versions/workflow-versions.store';
import { WorkflowVersionsMonitor } from './scheduler/workflow-versions.monitor';
import { StepStore } from './database/steps/step.store';
import { WorkflowClaimer } from './database/workflows/claim/workflow-claimer';
import { StrandedDuplicates } from './database/sweeps/stranded-duplicates';
import { DuplicateDeliveries } from './scheduler/duplicate-deliveries';
import { ExecutorHeartbeat } from './scheduler/executor.heartbeat';
import { NotificationListener } from './notifications/notification.listener';
import { OutcomeWriter } from './scheduler/outcome.writer';
import { BodyRunner } from './scheduler/body-runner';
import { IsolatedWorkflowCheck } from './discovery/isolated-workflow.check';
import { IsolatedBodies, THREAD_SERVICES } from './isolation/isolated-bodies';
import { ThreadPool } from './isolation/thread-pool';
import { QueueWorkerFactory } from './scheduler/queue-worker.factory';
import { WorkflowCompletions } from './workflow-completions';
import { SCHEDULE_CLOCK, systemClock } from './scheduling/schedule.clock';
import { ScheduleExplorer } from './scheduling/schedule.explorer';
import { ScheduleService } from './scheduling/schedule.service';
import { ScheduleStore } from './scheduling/schedule.store';
import { ScheduleTicker } from './scheduling/schedule.ticker';
import { TickEnqueuer } from './scheduling/tick.enqueuer';
import { WaitingStore } from './database/waiting/waiting.store';
import { MessageStore } from './database/messages/message.store';
import { WaitingWaker } from './composition/waiting.waker';
import { WorkflowWaits } from './composition/workflow-waits';
import { MessageSender } from './composition/message.sender';
import { StreamReaders } from './composition/stream-readers';

/**
 * Durable, Postgres-backed workflow queues with database-enforced deduplication.
 *
 * Import it once, in the root module: `DedupQueueModule.forRoot({ connection: { url }, queues: [...] })`, or
 * `DedupQueueModule.forRootAsync({ imports, inject, useFactory })`. It is global by default (`isGlobal: false`
 * to opt out), so `QueueService` can be injected anywhere.
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    {
      provide: DedupQueueConfig,
      useFactory: (options: DedupQueueModuleOptions, discovery: DiscoveryService) =>
        resolveConfig(options, findQueueRegistrations(discovery)),
      inject: [DEDUP_QUEUE_OPTIONS, DiscoveryService],
    },
    {
      provide: QueueDatabase,
      useFactory: (options: DedupQueueModuleOptions, config: DedupQueueConfig) => createQueueDatabase(options, config),
      inject: [DEDUP_QUEUE_OPTIONS, DedupQueueConfig],
    },
    onDatabase(WorkflowOutcomeStore),
    onDatabase(WorkflowControlStore),
    onDatabase(WorkflowReadStore),
    onDatabase(BulkControlStore),
    onDatabase(QueueControlStore),
    QueueSettings,
    onDatabase(WorkflowInserter),
    onDatabase(KeyHolderStore),
    onDatabase(DuplicatePolicyStore),
    WorkflowLifecycle,
    WorkflowTracer,
    QueueMetrics,
    WorkflowEventsExplorer,
    DeduplicationEvents,
    SupersededRuns,
    WorkflowEnqueuer,
    WorkflowRegistry,
    WorkflowExplorer,
    WorkflowCompletions,
    onDatabase(WorkflowClaimer),
    onDatabase(ExecutorStore),
    onDatabase(WorkflowVersionStore),
    WorkflowVersionsMonitor,
    onDatabase(HistoryPartitions),
    {
      provide: StepStore,
      useFactory: (database: QueueDatabase, config: DedupQueueConfig) => new StepStore(database, config.leaseMs),
      inject: [QueueDatabase, DedupQueueConfig],
    },
    onDatabase(WaitingStore),
    onDatabase(MessageStore),
    onDatabase(StrandedDuplicates),
    DuplicateDeliveries,
    WaitingWaker,
    WorkflowWaits,
    MessageSender,
    OutcomeWriter,
    ThreadPool,
    IsolatedBodies,
    { provide: IsolatedWorkflowCheck, useExisting: IsolatedBodies },
    {
      provide: THREAD_SERVICES,
      useFactory: (queueService: QueueService, schedules: ScheduleService) =>
        new Map<string, object>([
          [QueueService.name, queueService],
          [ScheduleService.name, schedules],
        ]),
      inject: [QueueService, ScheduleService],
    },
    BodyRunner,
    ExecutorHeartbeat,
    NotificationListener,
    QueueWorkerFactory,
    QueueScheduler,
    WorkflowHandleFactory,
    EnqueueService,
    WorkflowLookupService,
    WorkflowControlService,
    onDatabase(ForkStore),
    ForkService,
    BulkControlService,
    QueueControlService,
    onDatabase(ChildWorkflowStore),
    ChildWorkflows,
    WorkflowEvents,
    StreamReaders,
    QueueService,
    DedupQueueHealthIndicator,
    onDatabase(ScheduleStore),
    { provide: SCHEDULE_CLOCK, useValue: systemClock },
    TickEnqueuer,
    ScheduleExplorer,
    ScheduleTicker,
    ScheduleService,
    InjectedQueuesExplorer,
  ],
  // NOTE: the database, config, enqueuer and versions monitor are exported for DedupQueueDashboardModule; index.ts keeps
  // them private.
  exports: [
    QueueService,
    DedupQueueHealthIndicator,
    ScheduleService,
    QueueDatabase,
    DedupQueueConfig,
    WorkflowEnqueuer,
    WorkflowVersionsMonitor,
  ],
})
export class DedupQueueModule extends ConfigurableModuleClass {
  /**
   * Declares one or more queues in a feature module and provides a `WorkflowQueue` for each, injected with
   * `@InjectQueue(name)` (token `getQueueToken(name)`) in that module and in the modules that import it. The queues
   * are drained, limited and reported exactly like those of `forRoot({ queues })`; each queue is declared once in
   * the application (here or in `forRoot`), and a second declaration is a `DedupQueueConfigurationError` at boot.
   * Needs `DedupQueueModule.forRoot()` (global, the default) in the application.
   *
   * @example
   * ```ts
   * @Module({
   *   imports: [DedupQueueModule.registerQueue({ name: 'audio', concurrency: 2 })],
   *   providers: [AudioTasks, AudioService],
   * })
   * export class AudioModule {}
   * ```
   */
  static registerQueue(...queues: QueueOptions[]): DynamicModule {
    return DedupQueueRegistrationModule.register(queues);
  }
}

/** A provider of `store`, built on the module's `QueueDatabase`. */
function onDatabase<T>(store: new (database: QueueDatabase) => T): FactoryProvider<T> {
  return { provide: store, useFactory: (database: QueueDatabase) => new store(database), inject: [QueueDatabase] };
}
