import { Injectable } from '@nestjs/common';
import { WORKFLOW_METADATA } from '../dedup-queue.constants';
import type { WorkflowMetadata } from '../decorators/workflow.decorator';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import { UnknownWorkflowError } from '../errors/unknown-workflow.error';
import type { WorkflowOptions } from '../interfaces/workflow-options.interface';

/** A `@Workflow()` method bound to the provider instance that runs it. */
export interface RegisteredWorkflow {
  name: string;
  options: WorkflowOptions;
  /** Where it was declared, for messages: `ClassName.methodName`. */
  declaredAt: string;
  run(args: unknown[]): Promise<unknown>;
}

/** The application's workflows by name, filled by the explorer at module init. */
@Injectable()
export class WorkflowRegistry {
  private readonly workflows = new Map<string, RegisteredWorkflow>();

  register(workflow: RegisteredWorkflow): void {
    const { maxAttempts, maxRecoveryAttempts } = workflow.options;
    if (maxAttempts !== undefined && !(Number.isInteger(maxAttempts) && maxAttempts >= 1)) {
      throw new DedupQueueConfigurationError(`${workflow.declaredAt}: @Workflow({ maxAttempts }) must be a positive integer`);
    }
    if (maxRecoveryAttempts !== undefined && !(Number.isInteger(maxRecoveryAttempts) && maxRecoveryAttempts >= 0)) {
      throw new DedupQueueConfigurationError(
        `${workflow.declaredAt}: @Workflow({ maxRecoveryAttempts }) must be a non-negative integer`,
      );
    }
    const existing = this.workflows.get(workflow.name);
    if (existing) {
      throw new DedupQueueConfigurationError(
        `Two workflows are named "${workflow.name}" (${existing.declaredAt} and ${workflow.declaredAt}); ` +
          `give one of them another name with @Workflow({ name: '...' })`,
      );
    }
    this.workflows.set(workflow.name, workflow);
  }

  names(): string[] {
    return [...this.workflows.keys()];
  }

  find(name: string): RegisteredWorkflow | undefined {
    return this.workflows.get(name);
  }

  /** The registered name of a workflow given as a method reference or as a name; throws if there is none. */
  resolveName(workflow: Function | string): string {
    if (typeof workflow === 'string') {
      if (!this.workflows.has(workflow)) {
        throw new UnknownWorkflowError(workflow, `no @Workflow() method has this name (registered: ${this.describeNames()})`);
      }
      return workflow;
    }
    const metadata: WorkflowMetadata | undefined =
      typeof workflow === 'function' ? Reflect.getMetadata(WORKFLOW_METADATA, workflow) : undefined;
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
        'its class is not a provider of this application; add it to a module\'s providers',
      );
    }
    return metadata.name;
  }

  private describeNames(): string {
    return this.names().map((name) => `"${name}"`).join(', ') || 'none';
  }
}
