import { Injectable } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { DedupQueueConfig } from '../dedup-queue.config';
import type { IsolatedTarget } from '../discovery/workflow.registry';
import { IsolatedWorkflowCheck } from '../discovery/isolated-workflow.check';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import type { WorkflowExecution } from '../execution/workflow-execution';
import type { FromThread } from './thread-messages';
import { ThreadPool } from './thread-pool';
import { IsolatedRun, type ThreadServices } from './isolated-run';

/** The token of the services an isolated body may call from its thread (`QueueService`, ...), by class name. */
export const THREAD_SERVICES = Symbol('nest-dedup-queue: thread services');

/**
 * Runs the bodies of isolated workflows (`@Workflow({ isolate: 'thread' })`) in the module's worker threads, and
 * checks at boot, in a worker process, that a thread can load each of them and build its provider.
 */
@Injectable()
export class IsolatedBodies implements IsolatedWorkflowCheck {
  private services?: ThreadServices;

  constructor(
    private readonly config: DedupQueueConfig,
    private readonly pool: ThreadPool,
    private readonly moduleRef: ModuleRef,
  ) {}

  /** A run of `target`'s body for `execution`, started by its `run()`. */
  prepare(target: IsolatedTarget, execution: WorkflowExecution, inputsJson: string): IsolatedRun {
    // NOTE: looked up at the first run, not injected: the services depend on the scheduler, which runs the bodies.
    this.services ??= this.moduleRef.get<ThreadServices>(THREAD_SERVICES, { strict: false });
    return new IsolatedRun(target, execution, inputsJson, this.pool, this.services);
  }

  async verify(targets: IsolatedTarget[]): Promise<void> {
    if (!this.config.worker || targets.length === 0) return;
    const failures = await this.load(targets).catch(async (error: unknown) => {
      await this.pool.close();
      throw new DedupQueueConfigurationError(
        `The worker thread for isolated workflows (@Workflow({ isolate: 'thread' })) did not start: ` +
          (error instanceof Error ? error.message : String(error)),
      );
    });
    if (failures.length === 0) return;
    // NOTE: the boot fails, and a failed boot runs no shutdown hooks.
    await this.pool.close();
    throw new DedupQueueConfigurationError(
      `A worker thread cannot run ${failures.length} isolated workflow(s): ` +
        failures.map(({ target, error }) => `${target.className}.${target.methodName}: ${error.message}`).join('; '),
    );
  }

  /** Has a thread load the targets and build their providers; what failed. */
  private async load(targets: IsolatedTarget[]): Promise<LoadFailures> {
    let loaded!: (failures: LoadFailures) => void;
    let failed!: (error: Error) => void;
    const answer = new Promise<LoadFailures>((resolve, reject) => ((loaded = resolve), (failed = reject)));
    const thread = await this.pool.acquire({
      message: (message) => message.kind === 'loaded' && loaded(message.failures),
      ended: (error, exitCode) => failed(error ?? new Error(`it exited with code ${exitCode}`)),
    });
    thread.post({ kind: 'load', targets });
    try {
      return await answer;
    } finally {
      this.pool.release(thread);
    }
  }
}

type LoadFailures = Extract<FromThread, { kind: 'loaded' }>['failures'];
