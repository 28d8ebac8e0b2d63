export { DedupQueueModule } from './dedup-queue.module';
export { Workflow } from './decorators/workflow.decorator';
export { DedupExceptionFilter, DeduplicatedResponseBody } from './filters/dedup-exception.filter';
export { QueueService, WorkflowFunction } from './queue.service';
export * from './errors';
export * from './interfaces';
