import { Injectable, Logger } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import { Workflow } from 'nest-dedup-queue';
import { demoConfig } from './demo.config';

/** The demo's workflow: some slow work for one user. */
@Injectable()
export class UserTasks {
  private readonly logger = new Logger(UserTasks.name);

  @Workflow()
  async process(userId: string): Promise<{ userId: string; processedAt: string }> {
    this.logger.log(`processing ${userId}`);
    await sleep(demoConfig().taskDurationMs);
    return { userId, processedAt: new Date().toISOString() };
  }
}
