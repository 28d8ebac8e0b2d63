import { Controller, Param, Post, UseFilters } from '@nestjs/common';
import { DedupExceptionFilter, QueueService } from 'nest-dedup-queue';
import { UserTasks } from './user-tasks.service';

/** `POST /process/:userId`: one workflow per user at a time; a duplicate while it runs answers 409. */
@Controller('process')
@UseFilters(DedupExceptionFilter)
export class ProcessController {
  constructor(
    private readonly queueService: QueueService,
    private readonly tasks: UserTasks,
  ) {}

  @Post(':userId')
  async process(@Param('userId') userId: string): Promise<{ workflow_id: string }> {
    const handle = await this.queueService.enqueue('user_tasks', this.tasks.process, [userId], {
      deduplicationId: userId,
    });
    return { workflow_id: handle.workflowId };
  }
}
