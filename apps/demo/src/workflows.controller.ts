import { Controller, Get, NotFoundException, Param } from '@nestjs/common';
import { QueueService, WorkflowNotFoundError } from 'nest-dedup-queue';

/** `GET /workflows/:id`: a workflow's status, and its result once it finished. */
@Controller('workflows')
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
      };
      if (status.status === 'SUCCESS') body.result = status.result;
      if (status.status === 'ERROR') body.error = status.error?.message;
      return body;
    } catch (error) {
      if (error instanceof WorkflowNotFoundError) throw new NotFoundException(error.message);
      throw error;
    }
  }
}
