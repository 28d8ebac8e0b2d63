import { Logger } from '@nestjs/common';
import type { DedupQueueConfig } from '../dedup-queue.config';
import type { ExecutorStore, RecoveredWorkflow } from '../database/executor.store';
import type { WorkflowStore } from '../database/workflow.store';

/**
 * Keeps this executor's lease alive and, on every beat, recovers the workflows of executors whose lease expired
 * and cancels workflows past their timeout. At start it recovers what an earlier process with the same executor ID
 * left PENDING.
 */
export class ExecutorHeartbeat {
  private readonly logger = new Logger('DedupQueueScheduler');
  private timer?: NodeJS.Timeout;
  private beating?: Promise<void>;

  constructor(
    private readonly config: DedupQueueConfig,
    private readonly executors: ExecutorStore,
    private readonly workflows: WorkflowStore,
    private readonly onOwnershipLost: () => void,
  ) {}

  async start(): Promise<void> {
    await this.executors.register(this.config.executorId);
    this.report('left by an earlier process with this executor ID', await this.executors.recoverOwn(this.config.executorId));
    this.timer = setInterval(() => {
      this.beating ??= this.beat().finally(() => (this.beating = undefined));
    }, this.config.heartbeatIntervalMs);
    this.timer.unref();
  }

  /** Stops beating; with `leave`, removes the lease so peers recover whatever this process leaves PENDING at once. */
  async stop(leave: boolean): Promise<void> {
    clearInterval(this.timer);
    await this.beating;
    if (leave) {
      await this.executors.remove(this.config.executorId).catch((error: Error) =>
        this.logger.warn(`Could not remove executor ${this.config.executorId}: ${error.message}`),
      );
    }
  }

  private async beat(): Promise<void> {
    try {
      if (!(await this.executors.heartbeat(this.config.executorId))) {
        this.logger.warn(
          `Executor ${this.config.executorId} missed its lease and was declared dead; its running workflows are ` +
            `interrupted (they were recovered elsewhere) and it registers again`,
        );
        this.onOwnershipLost();
        await this.executors.register(this.config.executorId);
      }
      this.report('from executors whose lease expired', await this.executors.recoverExpired(this.config.leaseMs));
      const timedOut = await this.workflows.cancelTimedOut();
      if (timedOut.length > 0) this.logger.log(`Cancelled ${timedOut.length} workflow(s) past their timeout`);
    } catch (error) {
      this.logger.error(`Heartbeat of executor ${this.config.executorId} failed: ${(error as Error).message}`);
    }
  }

  private report(source: string, recovered: RecoveredWorkflow[]): void {
    if (recovered.length === 0) return;
    const deadLettered = recovered.filter((workflow) => workflow.status === 'MAX_RECOVERY_ATTEMPTS_EXCEEDED');
    this.logger.warn(
      `Recovered ${recovered.length - deadLettered.length} workflow(s) ${source}` +
        (deadLettered.length ? `; dead-lettered ${deadLettered.map((w) => w.workflowId).join(', ')} (MAX_RECOVERY_ATTEMPTS_EXCEEDED)` : ''),
    );
  }
}
