import { OnModuleInit } from '@nestjs/common';
import { ModuleLogger } from '../utils/module-logger';

/** Warns once at boot when the dashboard has no guard: anyone who can reach the application could then act on it. */
export class DashboardAccessWarning implements OnModuleInit {
  private readonly logger = new ModuleLogger('DedupQueueDashboardModule');

  constructor(
    private readonly path: string,
    private readonly guardCount: number,
  ) {}

  onModuleInit(): void {
    if (this.guardCount > 0) return;
    this.logger.warn(
      `The dashboard at ${this.path} has no guards: anyone who can reach the application can see, cancel and ` +
        'rerun workflows there. Give DedupQueueDashboardModule.forRoot({ guards: [YourAdminGuard] })',
    );
  }
}
