export { DedupQueueModule } from './dedup-queue.module';
export { Workflow } from './decorators/workflow.decorator';
export { Step } from './decorators/step.decorator';
export { OnWorkflowEvent } from './decorators/on-workflow-event.decorator';
export {
  DedupQueueCheck,
  DedupQueueHealthIndicator,
  DedupQueueHealthResult,
} from './reporting/dedup-queue.health-indicator';
export { Scheduled } from './decorators/scheduled.decorator';
export { ScheduleService } from './scheduling/schedule.service';
export { runStep, stepManager, workflowContext } from './execution/workflow-context';
export { setEvent } from './composition/workflow-events';
export { sleep } from './composition/durable-sleep';
export { deprecatePatch, patched } from './composition/workflow-patches';
export { DUPLICATE_TOPIC, recv } from './composition/workflow-messages';
export { closeStream, writeStream } from './composition/workflow-streams';
export {
  DEDUP_EXCEPTION_FILTER_OPTIONS,
  DedupExceptionFilter,
  DedupExceptionFilterOptions,
  DedupQueueErrorResponseBody,
  DeduplicatedResponseBody,
  DeduplicationMismatchResponseBody,
} from './filters/dedup-exception.filter';
export { QueueService } from './queue.service';
export { InjectQueue } from './decorators/inject-queue.decorator';
export { WorkflowQueue } from './queues/workflow-queue';
export { getQueueToken } from './queues/queue-token';
export * from './errors';
export * from './interfaces';
export * from './transactions';
export { DedupQueueDashboardModule } from './dashboard/dedup-queue-dashboard.module';
export * from './dashboard/dashboard-api.interface';
