import { Injectable } from '@nestjs/common';
import { StrandedDuplicates } from '../database/sweeps/stranded-duplicates';
import { ModuleLogger } from '../utils/module-logger';

/**
 * Delivers the `onDuplicate: 'send'` messages that finished holders of a queue left unreceived (see
 * `StrandedDuplicates`): right after an outcome of a workflow that was sent messages, and in every heartbeat sweep
 * (a holder that ended as a message reached it, a process that crashed in between). Logs each workflow it starts.
 */
@Injectable()
export class DuplicateDeliveries {
  private readonly logger = new ModuleLogger('DedupQueueScheduler');

  constructor(private readonly stranded: StrandedDuplicates) {}

  async deliver(queueName: string): Promise<void> {
    const { started } = await this.stranded.deliver(queueName);
    for (const workflowId of started) {
      this.logger.log(
        `Started workflow ${workflowId} in queue "${queueName}" with a duplicate's arguments that its holder ended ` +
          `without receiving (onDuplicate: 'send')`,
      );
    }
  }
}
