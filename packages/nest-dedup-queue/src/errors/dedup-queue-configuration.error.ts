import { DedupQueueError } from './dedup-queue.error';

/** Thrown at boot when the module's options or the application's `@Workflow()` methods cannot work. */
export class DedupQueueConfigurationError extends DedupQueueError {}
