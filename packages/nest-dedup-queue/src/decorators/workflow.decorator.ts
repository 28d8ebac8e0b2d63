import { WORKFLOW_METADATA } from '../dedup-queue.constants';
import type { WorkflowMetadata } from '../interfaces/workflow-metadata.interface';
import type { WorkflowOptions } from '../interfaces/workflow-options.interface';
import { callerFile } from '../utils/call-site';

/**
 * Registers a method of an `@Injectable()` provider as a workflow that queues can run.
 *
 * The method receives the JSON-deserialised arguments given to `QueueService.enqueue()` and runs on the provider
 * instance, so it can use the provider's injected dependencies. Its return value is stored as the result.
 *
 * @example
 * ```ts
 * @Injectable()
 * export class UserTasks {
 *   @Workflow()
 *   async process(userId: string) { ... }      // registered as 'UserTasks.process'
 * }
 * ```
 */
export function Workflow(options: WorkflowOptions = {}): MethodDecorator {
  // NOTE: a worker thread loads an isolated workflow's class from the file that declares it: this call's.
  const declaredIn = options?.isolate === undefined ? undefined : callerFile();
  return (target, propertyKey, descriptor) => {
    const metadata: WorkflowMetadata = {
      name: options.name ?? `${target.constructor.name}.${String(propertyKey)}`,
      options,
      declaredIn,
    };
    Reflect.defineMetadata(WORKFLOW_METADATA, metadata, descriptor.value as object);
    return descriptor;
  };
}
