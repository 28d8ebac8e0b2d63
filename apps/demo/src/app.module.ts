import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { DedupQueueDashboardModule, DedupQueueModule } from 'nest-dedup-queue';
import { DashboardAccessGuard } from './dashboard-access.guard';
import { demoConfig } from './demo.config';
import { HealthController } from './health.controller';
import { MetricsController } from './metrics.controller';
import { AnswersModule } from './answers.module';
import { UserTasksModule } from './user-tasks.module';
import { WorkflowsController } from './workflows.controller';

@Module({
  imports: [
    DedupQueueModule.forRootAsync({
      useFactory: () => {
        const config = demoConfig();
        return {
          connection: { url: config.databaseUrl },
          schema: config.schema,
          metrics: true,
        };
      },
    }),
    // Declares the `user_tasks` queue with DedupQueueModule.registerQueue().
    UserTasksModule,
    // Declares the `answers` queue: a streaming workflow (a fake language model) and its SSE route.
    AnswersModule,
    TerminusModule,
    // The dashboard at http://localhost:3000/queues, behind the demo's guard (open unless DEMO_DASHBOARD_PASSWORD).
    DedupQueueDashboardModule.forRoot({ path: '/queues', guards: [DashboardAccessGuard] }),
  ],
  controllers: [WorkflowsController, HealthController, MetricsController],
})
export class AppModule {}
