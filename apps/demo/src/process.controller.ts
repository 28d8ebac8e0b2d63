import { Controller, Param, Post, Res, UseFilters } from '@nestjs/common';
import { DedupExceptionFilter, InjectQueue, WorkflowQueue } from 'nest-dedup-queue';
import { UserTasks } from './user-tasks.service';

/**
 * `POST /process/:userId`: one workflow per user at a time; a duplicate while it runs answers 409, with a
 * `Location` header pointing at the workflow that holds the user's key.
 * `POST /process/:userId/join`: the same, but a duplicate joins the running workflow: 202 with its ID.
 */
@Controller('process')
@UseFilters(new DedupExceptionFilter({ location: (error) => `/workflows/${error.existingWorkflowId}` }))
export class ProcessController {
  constructor(
    @InjectQueue('user_tasks') private readonly userTasks: WorkflowQueue,
    private readonly tasks: UserTasks,
  ) {}

  @Post(':userId')
  async process(@Param('userId') userId: string): Promise<{ workflow_id: string }> {
    const handle = await this.userTasks.enqueue(this.tasks.process, [userId], {
      deduplicationId: userId,
    });
    return { workflow_id: handle.workflowId };
  }

  @Post(':userId/join')
  async processOrJoin(
    @Param('userId') userId: string,
    @Res({ passthrough: true }) response: { status(code: number): unknown },
  ): Promise<{ workflow_id: string; created: boolean }> {
    const handle = await this.userTasks.enqueue(this.tasks.process, [userId], {
      deduplicationId: userId,
      onDuplicate: 'return-existing',
    });
    response.status(handle.created ? 201 : 202);
    return { workflow_id: handle.workflowId, created: handle.created };
  }
}
