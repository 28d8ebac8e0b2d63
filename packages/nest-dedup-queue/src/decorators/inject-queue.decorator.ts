import { Inject } from '@nestjs/common';
import { getQueueToken } from '../queues/queue-token';

/**
 * Injects the `WorkflowQueue` of a queue declared with `DedupQueueModule.registerQueue({ name })` in the module of
 * the injecting provider (or in a module it imports).
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
  return Inject(getQueueToken(name));
}
