import { Injectable } from '@nestjs/common';
import { DedupQueueConfig } from '../dedup-queue.config';
import { describeError } from '../database/connection/connection-monitor';
import { StepStore } from '../database/steps/step.store';
import type { ClaimedWorkflow } from '../database/workflows/claim/claimed-rows';
import { type WorkflowOutcome, WorkflowOutcomeStore } from '../database/workflows/finish/workflow-outcomes.store';
import { WorkflowRegistry, type RegisteredWorkflow, type WorkflowRunOptions } from '../discovery/workflow.registry';
import { SUSPENDED, WorkflowWaits } from '../composition/workflow-waits';
import { WorkflowDeterminismError } from '../errors/workflow-determinism.error';
import type { InterruptReason } from '../errors/workflow-interrupted.error';
import { WorkflowExecution } from '../execution/workflow-execution';
import { IsolatedBodies } from '../isolation/isolated-bodies';
import { type RunTrace, WorkflowTracer } from '../observability/workflow.tracer';
import { backoffDelayMs } from '../utils/backoff';
import { toErrorInfo } from '../utils/error-info';
import { ModuleLogger } from '../utils/module-logger';
import { toStoredJson } from '../utils/stored-json';
import { logicalQueueName } from '../utils/queue-shards';

export { SUSPENDED } from '../composition/workflow-waits';

/** What the worker gives the run of one body: its signal, and how to interrupt it (the worker owns both). */
export interface RunControl {
  readonly signal: AbortSignal;
  interrupt(reason: InterruptReason): void;
}

/**
 * Runs the body of one claimed workflow in this process (on the main thread, or in a worker thread for
 * `@Workflow({ isolate: 'thread' })`), under this process's options for it, with the steps that earlier runs
 * recorded, and says what to record: SUCCESS with the result, RETRY after the backoff, or ERROR; or `SUSPENDED` when
 * the body was suspended in a durable wait (its workflow is WAITING in Postgres already, and nothing is recorded).
 */
@Injectable()
export class BodyRunner {
  private readonly logger = new ModuleLogger('DedupQueueScheduler');

  constructor(
    private readonly config: DedupQueueConfig,
    private readonly store: WorkflowOutcomeStore,
    private readonly steps: StepStore,
    private readonly registry: WorkflowRegistry,
    private readonly tracer: WorkflowTracer,
    private readonly waits: WorkflowWaits,
    private readonly isolated: IsolatedBodies,
  ) {}

  run(queueName: string, claimed: ClaimedWorkflow, control: RunControl): Promise<WorkflowOutcome | typeof SUSPENDED> {
    return this.tracer.process(queueName, claimed, (trace) => {
      const { workflowName, version } = claimed;
      const workflow = this.registry.find(workflowName, version);
      if (!workflow) {
        const notHere = new Error(`Workflow "${workflowName}" version ${version} is not registered in this process`);
        return Promise.resolve(failure(queueName, claimed, notHere));
      }
      return this.runRegistered(queueName, claimed, workflow, control, trace);
    });
  }

  private async runRegistered(
    queueName: string,
    claimed: ClaimedWorkflow,
    workflow: RegisteredWorkflow,
    control: RunControl,
    trace: RunTrace,
  ): Promise<WorkflowOutcome | typeof SUSPENDED> {
    const { workflowId, workflowName, version, attempts: attempt } = claimed;
    const own = this.registry.runOptions(workflowName, version);
    if (claimed.maxAttempts !== own.maxAttempts || claimed.maxRecoveryAttempts !== own.maxRecoveryAttempts) {
      await this.recordRunOptions(queueName, claimed, own);
    }
    let execution: WorkflowExecution | undefined;
    try {
      const replays = attempt > 1 || claimed.forked;
      const recorded = replays ? await this.steps.load(queueName, workflowId) : NOTHING_REPLAYED;
      const context = {
        workflowId,
        workflowName,
        version,
        queueName: logicalQueueName(queueName),
        attempt,
        get signal() {
          return control.signal;
        },
      };
      execution = new WorkflowExecution(
        context,
        this.config.executorId,
        recorded,
        this.steps,
        (reason) => control.interrupt(reason),
        trace,
        claimed.deadlineAt,
        queueName,
      );
      const result = await this.runBody(workflow, execution, claimed.inputsJson);
      if (execution.mismatch) return this.parked(queueName, claimed, execution.mismatch);
      if (result === SUSPENDED) return SUSPENDED;
      const outputJson =
        result === undefined ? null : toStoredJson(result, 'The result', this.steps.database.inputLimits);
      return { workflowId, queueName, attempt, status: 'SUCCESS', outputJson, error: null };
    } catch (thrown) {
      const mismatch = execution?.mismatch ?? (thrown instanceof WorkflowDeterminismError ? thrown : undefined);
      if (mismatch) return this.parked(queueName, claimed, mismatch);
      if (claimed.failedAttempts + 1 >= own.maxAttempts) return failure(queueName, claimed, thrown);
      const retryDelayMs = backoffDelayMs(claimed.failedAttempts + 1, own.backoff);
      return { ...failure(queueName, claimed, thrown), status: 'RETRY', retryDelayMs };
    }
  }

  /** A run that met changed code: dead-lettered with the determinism error, keeping its key (see `WorkflowOutcome`). */
  private parked(queueName: string, claimed: ClaimedWorkflow, mismatch: WorkflowDeterminismError): WorkflowOutcome {
    this.logger.warn(
      `Workflow ${claimed.workflowName} version ${claimed.version} (${claimed.workflowId}) is dead-lettered, keeping ` +
        `its key: ${mismatch.message}`,
    );
    return { ...failure(queueName, claimed, mismatch), status: 'PARKED' };
  }

  /** Runs the body in the frame of `execution`, in this thread or in a worker thread (`isolate: 'thread'`). */
  private runBody(workflow: RegisteredWorkflow, execution: WorkflowExecution, inputsJson: string): Promise<unknown> {
    if (!workflow.isolated) {
      return this.waits.run(execution, () => execution.run(() => workflow.run(JSON.parse(inputsJson) as unknown[])));
    }
    return this.runIsolated(workflow.isolated, execution, inputsJson);
  }

  private async runIsolated(
    isolatedWorkflow: NonNullable<RegisteredWorkflow['isolated']>,
    execution: WorkflowExecution,
    inputsJson: string,
  ): Promise<unknown> {
    const isolated = this.isolated.prepare(isolatedWorkflow, execution, inputsJson);
    try {
      return await this.waits.run(execution, () => execution.run(() => isolated.run()));
    } finally {
      isolated.end();
    }
  }

  /**
   * This process's options decide how the workflow retries and when it is dead-lettered, whatever the enqueuing
   * process stored (it may not have the workflow, or have other options); the row is corrected when they differ.
   */
  private async recordRunOptions(queueName: string, claimed: ClaimedWorkflow, own: WorkflowRunOptions): Promise<void> {
    try {
      await this.store.recordRunOptions(queueName, claimed.workflowId, claimed.attempts, own);
    } catch (error) {
      this.logger.warn(`Recording the options of workflow ${claimed.workflowId} failed: ${describeError(error)}`);
    }
  }
}

const NOTHING_REPLAYED: ReadonlyMap<number, never> = new Map<number, never>();

function failure(queueName: string, claimed: ClaimedWorkflow, thrown: unknown): WorkflowOutcome {
  const { workflowId, attempts: attempt } = claimed;
  return { workflowId, queueName, attempt, status: 'ERROR', outputJson: null, error: toErrorInfo(thrown) };
}
