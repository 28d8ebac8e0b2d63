import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { DedupQueueDashboardModule, DedupQueueModule } from 'nest-dedup-queue';
import { DashboardAccessGuard } from './dashboard-access.guard';
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
    // The dashboard at http://localhost:3000/queues, behind the demo's guard (open unless DEMO_DASHBOARD_PASSWORD).
    DedupQueueDashboardModule.forRoot({ path: '/queues', guards: [DashboardAccessGuard] }),
  ],
  controllers: [ProcessController, WorkflowsController, HealthController, MetricsController],
  providers: [UserTasks],
})
export class AppModule {}
