import { Injectable } from '@nestjs/common';
import { DedupQueueConfig } from '../dedup-queue.config';
import {
  ExecutorStore,
  type ExecutorLease,
  type ExecutorRuns,
  type RecoveredWorkflow,
} from '../database/executors/executor.store';
import { WorkflowRegistry } from '../discovery/workflow.registry';
import { WorkflowControlStore } from '../database/workflows/control/workflow-control.store';
import { HistoryPartitions } from '../database/sweeps/history-partitions';
import { describeError } from '../database/connection/connection-monitor';
import { WorkflowLifecycle } from '../observability/workflow-lifecycle.events';
import { FailureLog } from '../utils/failure-log';
import { DuplicateDeliveries } from './duplicate-deliveries';
import { ModuleLogger } from '../utils/module-logger';
import { everyStoredQueueName, storedQueueNames } from '../utils/queue-shards';

/** Retention runs at most this often; expired leases and timeouts are swept every heartbeat. */
const PRUNE_INTERVAL_MS = 30_000;

/** The history's daily partitions are extended this often (a week ahead). */
const EXTEND_INTERVAL_MS = 3_600_000;

/**
 * Keeps this executor's lease alive and, on a separate timer (so that a slow sweep never delays a renewal),
 * recovers the workflows of executors whose lease expired, cancels workflows past their timeout, drops finished
 * workflows past their retention and keeps the history's partitions a week ahead. At start it
 * recovers what an earlier process with the same executor ID left PENDING.
 */
@Injectable()
export class ExecutorHeartbeat {
  private readonly logger = new ModuleLogger('DedupQueueScheduler');
  private renewTimer?: NodeJS.Timeout;
  private sweepTimer?: NodeJS.Timeout;
  private renewing?: Promise<void>;
  private sweeping?: Promise<void>;
  private lastPruneAt = 0;
  private lastExtendAt = Date.now();
  private readonly renewFailures = new FailureLog(this.logger);
  private readonly sweepFailures = new FailureLog(this.logger);
  /** Called after the lease was found gone and registered again. */
  private onLeaseLost: () => Promise<void> = () => Promise.resolve();
  /** When the lease was last registered or renewed. */
  lastRenewedAt?: Date;

  constructor(
    private readonly config: DedupQueueConfig,
    private readonly executors: ExecutorStore,
    private readonly workflows: WorkflowControlStore,
    private readonly partitions: HistoryPartitions,
    private readonly lifecycle: WorkflowLifecycle,
    private readonly duplicates: DuplicateDeliveries,
    private readonly registry: WorkflowRegistry,
  ) {}

  /** Registers the lease, recovers what this executor ID left, and starts beating; `onLeaseLost` as above. */
  async start(onLeaseLost: () => Promise<void>): Promise<void> {
    this.onLeaseLost = onLeaseLost;
    await this.executors.register(this.config.executorId, this.runs(), this.lease());
    this.lastRenewedAt = new Date();
    for (const queueName of everyStoredQueueName(this.config)) {
      this.report(
        'left by an earlier process with this executor ID',
        await this.executors.recoverOwn(this.config.executorId, queueName),
      );
      this.report('of executors gone without a trace', await this.executors.recoverOrphans(queueName));
    }
    this.renewTimer = setInterval(() => {
      this.renewing ??= this.renew().finally(() => (this.renewing = undefined));
    }, this.config.heartbeatIntervalMs);
    this.sweepTimer = setInterval(() => {
      this.sweeping ??= this.sweep().finally(() => (this.sweeping = undefined));
    }, this.config.heartbeatIntervalMs);
    this.renewTimer.unref();
    this.sweepTimer.unref();
  }

  /** Stops beating; with `leave`, ends the lease at once, so that peers recover what this process leaves PENDING at their next sweep. */
  async stop(leave: boolean): Promise<void> {
    clearInterval(this.renewTimer);
    clearInterval(this.sweepTimer);
    await Promise.all([this.renewing, this.sweeping]);
    if (leave) {
      await this.executors
        .remove(this.config.executorId, this.lease())
        .catch((error: unknown) =>
          this.logger.warn(
            `Could not remove executor ${this.config.executorId} (peers recover its work after its lease): ${describeError(error)}`,
          ),
        );
    }
  }

  /** What this executor runs, as its lease row records it. */
  private runs(): ExecutorRuns {
    return { queues: [...this.config.workerQueues], workflows: this.registry.registrations() };
  }

  /** On Citus, the queues this executor claims from, where it takes a lease of `leaseMs`. */
  private lease(): ExecutorLease {
    return {
      queues: [...this.config.workerQueues].flatMap((queueName) => storedQueueNames(this.config, queueName)),
      ms: this.config.leaseMs,
    };
  }

  private async renew(): Promise<void> {
    try {
      if (!(await this.executors.heartbeat(this.config.executorId, this.lease()))) {
        this.logger.warn(
          `Executor ${this.config.executorId} missed its lease and was declared dead; it registers again and ` +
            `interrupts its running workflows that were recovered elsewhere`,
        );
        await this.executors.register(this.config.executorId, this.runs(), this.lease());
        await this.onLeaseLost();
      }
      this.renewFailures.succeeded();
      this.lastRenewedAt = new Date();
    } catch (error) {
      this.renewFailures.failed(`Renewing the lease of executor ${this.config.executorId}`, error);
    }
  }

  /**
   * One queue's failure (on Citus, the node holding it is down) does not keep the others from being swept; the
   * first failure of a round is logged (connection failures are told by the connection monitor).
   */
  private async sweep(): Promise<void> {
    let failure: { error: unknown } | undefined;
    try {
      this.report(
        'from executors whose lease expired',
        await this.executors.recoverExpired(this.config.leaseMs, everyStoredQueueName(this.config)),
      );
    } catch (error) {
      failure = { error };
    }
    for (const queueName of everyStoredQueueName(this.config)) {
      try {
        await this.sweepQueue(queueName);
      } catch (error) {
        failure ??= { error };
      }
    }
    try {
      const retentionMs = this.config.retentionMs;
      if (retentionMs !== null && Date.now() - this.lastPruneAt >= Math.min(PRUNE_INTERVAL_MS, retentionMs)) {
        this.lastPruneAt = Date.now();
        await this.partitions.prune(retentionMs);
      }
      if (Date.now() - this.lastExtendAt >= EXTEND_INTERVAL_MS) {
        this.lastExtendAt = Date.now();
        await this.partitions.extend();
      }
    } catch (error) {
      failure ??= { error };
    }
    if (failure) this.sweepFailures.failed('Sweeping for expired leases and timeouts', failure.error);
    else this.sweepFailures.succeeded();
  }

  private async sweepQueue(queueName: string): Promise<void> {
    const timedOut = await this.workflows.cancelTimedOut(queueName);
    if (timedOut.length > 0) this.logger.log(`Cancelled ${timedOut.length} workflow(s) past their timeout`);
    for (const workflow of timedOut) this.lifecycle.emit({ event: 'cancelled', ...workflow, reason: 'timed-out' });
    const handedOver = await this.workflows.handOverStrandedFollowUps(queueName);
    if (handedOver > 0) {
      this.logger.log(`Handed ${handedOver} stranded follow-up(s) of queue "${queueName}" their deduplication key`);
    }
    await this.duplicates.deliver(queueName);
  }

  private report(source: string, recovered: RecoveredWorkflow[]): void {
    if (recovered.length === 0) return;
    for (const { status, ...workflow } of recovered) {
      this.lifecycle.emit({ event: status === 'ENQUEUED' ? 'recovered' : 'dead-lettered', ...workflow });
    }
    const deadLettered = recovered.filter((workflow) => workflow.status === 'MAX_RECOVERY_ATTEMPTS_EXCEEDED');
    this.logger.warn(
      `Recovered ${recovered.length - deadLettered.length} workflow(s) ${source}` +
        (deadLettered.length
          ? `; dead-lettered ${deadLettered.map((w) => w.workflowId).join(', ')} (MAX_RECOVERY_ATTEMPTS_EXCEEDED)`
          : ''),
    );
  }
}
