import { DedupQueueError } from './dedup-queue.error';

/**
 * Thrown by an enqueue (or a schedule's creation) made before `DedupQueueModule` was initialised: its workflows are
 * registered during `app.init()` (which `listen()` calls), in the module's `onModuleInit`. From the application's own
 * `onModuleInit` hooks on, an enqueue works; workers start at `onApplicationBootstrap`.
 */
export class ModuleNotInitialisedError extends DedupQueueError {
  constructor() {
    super(
      'DedupQueueModule is not initialised yet: call app.init() or listen() first (an enqueue works from ' +
        "an application's onModuleInit on; workers start at onApplicationBootstrap)",
    );
  }
}
