import { DedupQueueError } from './dedup-queue.error';

/** Thrown by `ScheduleService` when no schedule has the given name. */
export class ScheduleNotFoundError extends DedupQueueError {
  constructor(readonly scheduleName: string) {
    super(`Schedule "${scheduleName}" does not exist`);
  }
}
