import { Injectable } from '@nestjs/common';

/** Lets handles in this process learn at once that a workflow this process ran has finished. */
@Injectable()
export class WorkflowCompletions {
  private readonly waiters = new Map<string, Set<() => void>>();

  /** Resolves when `workflowId` is reported finished here, or after `timeoutMs`, whichever comes first. */
  waitFor(workflowId: string, timeoutMs: number): Promise<void> {
    return new Promise((resolve) => {
      const waiters = this.waiters.get(workflowId) ?? new Set();
      this.waiters.set(workflowId, waiters);
      const done = () => {
        clearTimeout(timer);
        waiters.delete(done);
        if (waiters.size === 0) this.waiters.delete(workflowId);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      waiters.add(done);
    });
  }

  finished(workflowId: string): void {
    for (const done of [...(this.waiters.get(workflowId) ?? [])]) done();
  }
}
