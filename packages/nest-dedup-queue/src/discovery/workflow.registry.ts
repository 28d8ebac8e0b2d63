import { Injectable } from '@nestjs/common';
import { DedupQueueConfig } from '../dedup-queue.config';
import { WORKFLOW_METADATA } from '../dedup-queue.constants';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import { InvalidArgumentError } from '../errors/invalid-argument.error';
import { ModuleNotInitialisedError } from '../errors/module-not-initialised.error';
import { UnknownWorkflowError } from '../errors/unknown-workflow.error';
import type { BackoffOptions } from '../interfaces/backoff-options.interface';
import type { WorkflowFunction } from '../interfaces/workflow-function.interface';
import type { WorkflowMetadata } from '../interfaces/workflow-metadata.interface';
import type { WorkflowOptions } from '../interfaces/workflow-options.interface';
import { MAX_WORKFLOW_VERSION, WorkflowRegistration, claimKey } from '../database/versions/workflow-registrations';

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
 * The application's workflows by name and version, filled by the explorer at module init, their aliases, and the
 * names it may enqueue without having them (`externalWorkflows`).
 */
@Injectable()
export class WorkflowRegistry {
  /** Each name's versions, highest last. */
  private readonly workflows = new Map<string, Map<number, RegisteredWorkflow>>();
  /** By `claimKey`: every name and version this process runs, aliases included. */
  private readonly byClaimKey = new Map<string, RegisteredWorkflow>();
  /** Each name's highest version, and each workflow's run options: read at every enqueue and every run. */
  private readonly highest = new Map<string, { version: number; workflow: RegisteredWorkflow }>();
  private readonly ownOptions = new WeakMap<RegisteredWorkflow, Readonly<WorkflowRunOptions>>();
  /** An alias's name: the name it stands for. */
  private readonly aliases = new Map<string, string>();
  /** Set once the explorer registered every workflow (at module init): before, no name can be told unknown. */
  private complete = false;

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
    const version = versionOf(workflow);
    const aliases = aliasesOf(workflow);
    for (const name of [workflow.name, ...aliases]) {
      const taken = this.byClaimKey.get(claimKey(name, version));
      if (taken) {
        throw new DedupQueueConfigurationError(
          `Two workflows are named "${name}" (${taken.declaredAt} and ${workflow.declaredAt}), both at version ` +
            `${version}; give one of them another name with @Workflow({ name: '...' }), or another version with ` +
            `@Workflow({ version })`,
        );
      }
    }
    for (const alias of aliases) {
      if (this.workflows.has(alias) || (this.aliases.get(alias) ?? workflow.name) !== workflow.name) {
        throw new DedupQueueConfigurationError(
          `${workflow.declaredAt}: @Workflow({ aliases }) lists "${alias}", which is the name of another ` +
            `registered workflow (or an alias of one)`,
        );
      }
    }
    if (this.aliases.has(workflow.name)) {
      throw new DedupQueueConfigurationError(
        `${workflow.declaredAt}: its name "${workflow.name}" is an alias of workflow ` +
          `"${this.aliases.get(workflow.name)}"; an old name cannot be registered again`,
      );
    }
    const versions = this.workflows.get(workflow.name) ?? new Map<number, RegisteredWorkflow>();
    versions.set(version, workflow);
    const sorted = new Map([...versions].sort(([a], [b]) => a - b));
    this.workflows.set(workflow.name, sorted);
    const [highestVersion, highestWorkflow] = [...sorted].at(-1) as [number, RegisteredWorkflow];
    this.highest.set(workflow.name, { version: highestVersion, workflow: highestWorkflow });
    for (const name of [workflow.name, ...aliases]) this.byClaimKey.set(claimKey(name, version), workflow);
    for (const alias of aliases) this.aliases.set(alias, workflow.name);
  }

  /** Called by the explorer once it registered every workflow of the application. */
  markComplete(): void {
    this.complete = true;
  }

  /** The workflows whose bodies run in worker threads. */
  isolated(): IsolatedTarget[] {
    return [...this.workflows.values()].flatMap((versions) =>
      [...versions.values()].flatMap(({ isolated }) => (isolated ? [isolated] : [])),
    );
  }

  /** The names of the registered workflows (without their aliases). */
  names(): string[] {
    return [...this.workflows.keys()];
  }

  /** Every name and version this process runs, aliases included: what its workers claim. */
  registrations(): WorkflowRegistration[] {
    return [...this.byClaimKey.entries()].map(([key, workflow]) => ({
      name: key.slice(key.indexOf(':') + 1),
      version: versionOf(workflow),
    }));
  }

  /** `registrations()` as claim keys (see `claimKey`). */
  claimKeys(): string[] {
    return [...this.byClaimKey.keys()];
  }

  /**
   * The method that runs `name` (a registered name or an alias) at `version`; without a version, the highest
   * version of that name. Undefined when this process does not run it.
   */
  find(name: string, version?: number): RegisteredWorkflow | undefined {
    if (version !== undefined) return this.byClaimKey.get(claimKey(name, version));
    return this.highest.get(this.aliases.get(name) ?? name)?.workflow;
  }

  /** The highest version of `name` (or of the workflow an alias stands for) this process registers, if any. */
  highestVersion(name: string): number | undefined {
    return this.highest.get(this.aliases.get(name) ?? name)?.version;
  }

  /**
   * The workflow's own options as this process applies them (of `version`, or of its highest version); the
   * defaults for an external workflow or a version this process does not have.
   */
  runOptions(name: string, version?: number): Readonly<WorkflowRunOptions> {
    const workflow = this.find(name, version);
    let own = workflow && this.ownOptions.get(workflow);
    if (!own) {
      const options = workflow?.options ?? {};
      own = {
        maxAttempts: options.maxAttempts ?? 1,
        maxRecoveryAttempts: options.maxRecoveryAttempts ?? this.config.maxRecoveryAttempts,
        backoff: options.backoff,
      };
      if (workflow) this.ownOptions.set(workflow, own);
    }
    return own;
  }

  /**
   * The queue of an enqueue that names none: the workflow's `@Workflow({ queue })`.
   * @throws InvalidArgumentError when the workflow has no default queue
   */
  defaultQueue(workflow: WorkflowFunction | string): string {
    const name = this.resolveName(workflow);
    const queue = this.find(name)?.options.queue;
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
   * The registered name of a workflow given as a method reference or as a name (a local workflow's, an alias of
   * one, which gives the workflow's name, or one listed in `externalWorkflows`); throws if there is none. A method
   * reference names its workflow, not its version.
   * @throws ModuleNotInitialisedError before the module's init registered the workflows
   * @throws UnknownWorkflowError for a name or function that is no workflow of this application
   */
  resolveName(workflow: WorkflowFunction | string): string {
    if (!this.complete) throw new ModuleNotInitialisedError();
    if (typeof workflow === 'string') {
      const renamed = this.aliases.get(workflow);
      if (renamed !== undefined) return renamed;
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
      const registered = `(registered: ${this.describeNames()})`;
      throw new UnknownWorkflowError(
        shown,
        shown.startsWith('bound ')
          ? `pass the @Workflow() method itself (e.g. this.tasks.process, not a bound or wrapped function) or its ` +
              `registered name ${registered}`
          : `the function has no @Workflow() decorator: decorate the method with @Workflow(), or pass a @Workflow() ` +
              `method itself (not a wrapper of one) or its registered name ${registered}`,
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

/** `@Workflow({ version })`, checked; 1 when not given. */
function versionOf(workflow: RegisteredWorkflow): number {
  const { version } = workflow.options;
  if (version === undefined) return 1;
  if (!(Number.isInteger(version) && version >= 1 && version <= MAX_WORKFLOW_VERSION)) {
    throw new DedupQueueConfigurationError(
      `${workflow.declaredAt}: @Workflow({ version }) must be a positive integer, got ${JSON.stringify(version)}`,
    );
  }
  return version;
}

/** `@Workflow({ aliases })`, checked. */
function aliasesOf(workflow: RegisteredWorkflow): string[] {
  const { aliases } = workflow.options;
  if (aliases === undefined) return [];
  if (
    !Array.isArray(aliases) ||
    aliases.some((alias) => typeof alias !== 'string' || alias === '' || alias === workflow.name)
  ) {
    throw new DedupQueueConfigurationError(
      `${workflow.declaredAt}: @Workflow({ aliases }) must be an array of the workflow's former names (non-empty ` +
        `strings other than its name "${workflow.name}")`,
    );
  }
  return [...new Set(aliases)];
}
