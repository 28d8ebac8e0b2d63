import { Inject, Optional } from '@nestjs/common';
import { INJECTED_QUEUES_METADATA } from '../dedup-queue.constants';
import { getQueueToken } from '../queues/queue-token';

/** `@Inject()` and `@Optional()` as called on a constructor parameter or a property alike. */
type AnyInjectionDecorator = (target: object, key: string | symbol | undefined, index?: number) => void;

/**
 * Injects the `WorkflowQueue` of a queue declared with `DedupQueueModule.registerQueue({ name })` in the module of
 * the injecting provider (or in a module it imports). A name that no `registerQueue` declares, or one the injecting
 * class's module cannot see, is a `DedupQueueConfigurationError` at boot that names the queue, the declared queues
 * and what to import or declare.
 *
 * @example
 * ```ts
 * @Injectable()
 * export class AudioService {
 *   constructor(@InjectQueue('audio') private readonly audio: WorkflowQueue) {}
 *
 *   transcode(fileId: string) {
 *     return this.audio.enqueue(this.tasks.transcode, [fileId], { deduplicationId: fileId });
 *   }
 * }
 * ```
 */
export function InjectQueue(name: string): PropertyDecorator & ParameterDecorator {
  return (target: object, key: string | symbol | undefined, index?: number) => {
    // NOTE: optional, so that Nest's generic "can't resolve dependencies" does not come first: InjectedQueuesExplorer
    // explains a missing queue at boot, from the names recorded here.
    for (const decorate of [Inject(getQueueToken(name)), Optional()] as AnyInjectionDecorator[]) {
      decorate(target, key, index);
    }
    const host = typeof index === 'number' ? target : target.constructor;
    const names = (Reflect.getOwnMetadata(INJECTED_QUEUES_METADATA, host) as string[] | undefined) ?? [];
    Reflect.defineMetadata(INJECTED_QUEUES_METADATA, [...names, name], host);
  };
}
