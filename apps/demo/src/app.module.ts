import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { DedupQueueModule } from 'nest-dedup-queue';
import { demoConfig } from './demo.config';
import { HealthController } from './health.controller';
import { MetricsController } from './metrics.controller';
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
          metrics: true,
        };
      },
    }),
    TerminusModule,
  ],
  controllers: [ProcessController, WorkflowsController, HealthController, MetricsController],
  providers: [UserTasks],
})
export class AppModule {}
