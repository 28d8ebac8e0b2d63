import { Module } from '@nestjs/common';
import { DedupQueueModule } from 'nest-dedup-queue';
import { ProcessController } from './process.controller';
import { UserTasks } from './user-tasks.service';

/** The user-processing feature: its queue (declared here, with its limits), its workflow and its HTTP routes. */
@Module({
  imports: [DedupQueueModule.registerQueue({ name: 'user_tasks', workerConcurrency: 10 })],
  controllers: [ProcessController],
  providers: [UserTasks],
})
export class UserTasksModule {}
