import { Module } from '@nestjs/common';
import { DedupQueueModule } from 'nest-dedup-queue';
import { demoConfig } from './demo.config';
import { ProcessController } from './process.controller';
import { UserTasks } from './user-tasks.service';
import { WorkflowsController } from './workflows.controller';

@Module({
  imports: [
    DedupQueueModule.forRootAsync({
      useFactory: () => {
        const config = demoConfig();
        return {
          connection: { url: config.databaseUrl },
          schema: config.schema,
          queues: [{ name: 'user_tasks', workerConcurrency: 10 }],
        };
      },
    }),
  ],
  controllers: [ProcessController, WorkflowsController],
  providers: [UserTasks],
})
export class AppModule {}
