import { Controller, Get, NotFoundException, Param, Query, UseFilters } from '@nestjs/common';
import { DedupExceptionFilter, InvalidArgumentError, QueueService, WorkflowNotFoundError } from 'nest-dedup-queue';

/** The longest `waitMs` a progress request may ask for. */
const MAX_WAIT_MS = 30_000;

/**
 * `GET /workflows/:id`: a workflow's status, its last `progress` event, and its result once it finished.
 * `GET /workflows/:id/progress?waitMs=`: its last `progress` event, waiting up to `waitMs` for the first one; this is
 * how a caller refused with 409 follows the workflow that holds its key (the 409's `Location` leads here).
 */
@Controller('workflows')
@UseFilters(new DedupExceptionFilter())
export class WorkflowsController {
  constructor(private readonly queueService: QueueService) {}

  @Get(':id')
  async status(@Param('id') id: string): Promise<Record<string, unknown>> {
    try {
      const handle = await this.queueService.retrieve(id);
      const status = await handle.getStatus();
      const body: Record<string, unknown> = {
        workflow_id: status.workflowId,
        status: status.status,
        queue: status.queueName,
        deduplication_id: status.deduplicationId,
        created_at: status.createdAt,
        started_at: status.startedAt,
        completed_at: status.completedAt,
        progress: (await this.queueService.getEvent(id, 'progress', { timeoutMs: 0 })) ?? null,
        progress_url: `/workflows/${id}/progress`,
      };
      if (status.status === 'SUCCESS') body.result = status.result;
      if (status.status === 'ERROR') body.error = status.error?.message;
      return body;
    } catch (error) {
      if (error instanceof WorkflowNotFoundError) throw new NotFoundException(error.message);
      throw error;
    }
  }

  @Get(':id/progress')
  async progress(@Param('id') id: string, @Query('waitMs') waitMs?: string): Promise<Record<string, unknown>> {
    const timeoutMs = Math.min(Number(waitMs ?? 0), MAX_WAIT_MS);
    if (!Number.isFinite(timeoutMs) || timeoutMs < 0) {
      throw new InvalidArgumentError('waitMs', 'must be a number of milliseconds, 0 or more');
    }
    await this.queueService.retrieve(id);
    return { workflow_id: id, progress: (await this.queueService.getEvent(id, 'progress', { timeoutMs })) ?? null };
  }
}
