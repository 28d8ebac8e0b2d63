import { Injectable, Logger } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import { Workflow, setEvent } from 'nest-dedup-queue';
import { demoConfig } from './demo.config';

/** How many parts one run's work is cut into; its `progress` event counts them. */
const PARTS = 4;

/** What `UserTasks.process` publishes as its `progress` event, read with `QueueService.getEvent(id, 'progress')`. */
export interface Progress {
  done: number;
  of: number;
}

/** The demo's workflow: some slow work for one user, publishing its progress as it goes. */
@Injectable()
export class UserTasks {
  private readonly logger = new Logger(UserTasks.name);

  @Workflow()
  async process(userId: string): Promise<{ userId: string; processedAt: string }> {
    this.logger.log(`processing ${userId}`);
    for (let done = 0; done < PARTS; done++) {
      await setEvent('progress', { done, of: PARTS } satisfies Progress);
      await sleep(demoConfig().taskDurationMs / PARTS);
    }
    await setEvent('progress', { done: PARTS, of: PARTS } satisfies Progress);
    return { userId, processedAt: new Date().toISOString() };
  }
}
