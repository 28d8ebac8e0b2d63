import { STEP_METADATA } from '../dedup-queue.constants';
import { runStep } from '../execution/workflow-context';
import type { StepOptions } from '../interfaces/step-options.interface';

/**
 * Makes a provider method a durable step when a workflow calls it: its result (or error) is checkpointed in
 * Postgres, and when the workflow runs again after a crash or a retry, the recorded outcome is returned without
 * running the method. Called outside a workflow, the method simply runs. The method must be async.
 *
 * @example
 * ```ts
 * @Step({ maxAttempts: 3, backoff: { initialDelayMs: 500 } })
 * async chargeCard(orderId: string) { ... }
 * ```
 */
export function Step(options: StepOptions = {}): MethodDecorator {
  return (target, propertyKey, descriptor) => {
    const original = descriptor.value as unknown as (...args: unknown[]) => unknown;
    const name = options.name ?? `${target.constructor.name}.${String(propertyKey)}`;
    const step = function (this: unknown, ...args: unknown[]) {
      return runStep(name, () => original.apply(this, args), options);
    };
    for (const key of Reflect.getMetadataKeys(original)) {
      Reflect.defineMetadata(key, Reflect.getMetadata(key, original), step);
    }
    Reflect.defineMetadata(STEP_METADATA, { name, options }, step);
    Object.defineProperty(step, 'name', { value: original.name });
    descriptor.value = step as never;
    return descriptor;
  };
}
