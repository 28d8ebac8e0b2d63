import { Injectable } from '@nestjs/common';
import { DedupQueueConfig } from '../dedup-queue.config';
import { WORKFLOW_METADATA } from '../dedup-queue.constants';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { UnknownWorkflowError } from '../errors/unknown-workflow.error';
import type { BackoffOptions } from '../interfaces/backoff-options.interface';
import type { WorkflowFunction } from '../interfaces/workflow-function.interface';
import type { WorkflowMetadata } from '../interfaces/workflow-metadata.interface';
import type { WorkflowOptions } from '../interfaces/workflow-options.interface';

/** Where a worker thread finds an isolated workflow: the file that declares its class, the class, the method. */
export interface IsolatedTarget {
  /** A path, or a `file:` URL for an ES module. */
  file: string;
  className: string;
  methodName: string;
  workflowName: string;
}

/** A `@Workflow()` method bound to the provider instance that runs it. */
export interface RegisteredWorkflow {
  name: string;
  options: WorkflowOptions;
  /** Where it was declared, for messages: `ClassName.methodName`. */
  declaredAt: string;
  run(args: unknown[]): Promise<unknown>;
  /** Set for `@Workflow({ isolate: 'thread' })`: its body runs in a worker thread, which loads it from here. */
  isolated?: IsolatedTarget;
}

/**
 * A workflow's own options as this process applies them, defaults filled in. The process that runs a workflow
 * decides by these, whatever the enqueuing process stored.
 */
export interface WorkflowRunOptions {
  maxAttempts: number;
  maxRecoveryAttempts: number;
  backoff?: BackoffOptions;
}

/**
 * The application's workflows by name, filled by the explorer at module init, and the names it may enqueue without
 * having them (`externalWorkflows`).
 */
@Injectable()
export class WorkflowRegistry {
  private readonly workflows = new Map<string, RegisteredWorkflow>();

  constructor(private readonly config: DedupQueueConfig) {}

  register(workflow: RegisteredWorkflow): void {
    const { maxAttempts, maxRecoveryAttempts, queue } = workflow.options;
    if (maxAttempts !== undefined && !(Number.isInteger(maxAttempts) && maxAttempts >= 1)) {
      throw new DedupQueueConfigurationError(
        `${workflow.declaredAt}: @Workflow({ maxAttempts }) must be a positive integer`,
      );
    }
    if (maxRecoveryAttempts !== undefined && !(Number.isInteger(maxRecoveryAttempts) && maxRecoveryAttempts >= 0)) {
      throw new DedupQueueConfigurationError(
        `${workflow.declaredAt}: @Workflow({ maxRecoveryAttempts }) must be a non-negative integer`,
      );
    }
    if (queue !== undefined && !(typeof queue === 'string' && this.config.queues.has(queue))) {
      throw new DedupQueueConfigurationError(
        `${workflow.declaredAt}: @Workflow({ queue: ${JSON.stringify(queue)} }) names a queue that is not declared ` +
          `(declared: ${describe(this.config.queues.keys())}); declare it in forRoot({ queues }) or registerQueue()`,
      );
    }
    assertIsolable(workflow);
    const existing = this.workflows.get(workflow.name);
    if (existing) {
      throw new DedupQueueConfigurationError(
        `Two workflows are named "${workflow.name}" (${existing.declaredAt} and ${workflow.declaredAt}); ` +
          `give one of them another name with @Workflow({ name: '...' })`,
      );
    }
    this.workflows.set(workflow.name, workflow);
  }

  /** The workflows whose bodies run in worker threads. */
  isolated(): IsolatedTarget[] {
    return [...this.workflows.values()].flatMap(({ isolated }) => (isolated ? [isolated] : []));
  }

  names(): string[] {
    return [...this.workflows.keys()];
  }

  find(name: string): RegisteredWorkflow | undefined {
    return this.workflows.get(name);
  }

  /** The workflow's own options as this process applies them; the defaults for an external workflow. */
  runOptions(name: string): WorkflowRunOptions {
    const options = this.workflows.get(name)?.options ?? {};
    return {
      maxAttempts: options.maxAttempts ?? 1,
      maxRecoveryAttempts: options.maxRecoveryAttempts ?? this.config.maxRecoveryAttempts,
      backoff: options.backoff,
    };
  }

  /**
   * The queue of an enqueue that names none: the workflow's `@Workflow({ queue })`.
   * @throws InvalidArgumentError when the workflow has no default queue
   */
  defaultQueue(workflow: WorkflowFunction | string): string {
    const name = this.resolveName(workflow);
    const queue = this.workflows.get(name)?.options.queue;
    if (queue === undefined) {
      throw new InvalidArgumentError(
        'queueName',
        `is required: workflow "${name}" has no default queue; give one, enqueue(queue, workflow, args), ` +
          `or declare it with @Workflow({ queue })`,
      );
    }
    return queue;
  }

  /**
   * The registered name of a workflow given as a method reference or as a name (a local workflow's, or one listed in
   * `externalWorkflows`); throws if there is none.
   */
  resolveName(workflow: WorkflowFunction | string): string {
    if (typeof workflow === 'string') {
      if (!this.workflows.has(workflow) && !this.config.externalWorkflows.has(workflow)) {
        throw new UnknownWorkflowError(
          workflow,
          `no @Workflow() method has this name (registered: ${this.describeNames()}) and ` +
            `forRoot({ externalWorkflows }) does not list it (listed: ${describe(this.config.externalWorkflows)})`,
        );
      }
      return workflow;
    }
    const metadata =
      typeof workflow === 'function'
        ? (Reflect.getMetadata(WORKFLOW_METADATA, workflow) as WorkflowMetadata | undefined)
        : undefined;
    if (!metadata) {
      const shown = typeof workflow === 'function' ? workflow.name || '(anonymous function)' : String(workflow);
      throw new UnknownWorkflowError(
        shown,
        'pass the @Workflow() method itself (e.g. this.tasks.process, not a bound or wrapped function) or its registered name',
      );
    }
    if (!this.workflows.has(metadata.name)) {
      throw new UnknownWorkflowError(
        metadata.name,
        "its class is not a provider of this application; add it to a module's providers",
      );
    }
    return metadata.name;
  }

  private describeNames(): string {
    return describe(this.names());
  }
}

function assertIsolable({ options, declaredAt, isolated }: RegisteredWorkflow): void {
  const { isolate, threadModule } = options;
  if (isolate !== undefined && isolate !== 'thread') {
    throw new DedupQueueConfigurationError(
      `${declaredAt}: @Workflow({ isolate }) must be 'thread' (the body runs in a worker thread), or left out`,
    );
  }
  if (threadModule !== undefined && (isolate === undefined || typeof threadModule !== 'function')) {
    throw new DedupQueueConfigurationError(
      `${declaredAt}: @Workflow({ threadModule }) takes a function that returns a module (() => MyThreadModule), ` +
        `with isolate: 'thread'`,
    );
  }
  if (isolate !== undefined && !isolated) {
    throw new DedupQueueConfigurationError(
      `${declaredAt}: @Workflow({ isolate: 'thread' }) could not tell the file that declares the class, which the ` +
        `worker thread loads (the stack of the decorator's call named none)`,
    );
  }
  if (isolated && isolated.file === require.main?.filename) {
    throw new DedupQueueConfigurationError(
      `${declaredAt}: @Workflow({ isolate: 'thread' }) is declared in the application's entry file (${isolated.file}), ` +
        `which a worker thread would run again, starting a second application; move the class to a file of its own`,
    );
  }
}

function describe(names: Iterable<string>): string {
  return [...names].map((name) => `"${name}"`).join(', ') || 'none';
}
