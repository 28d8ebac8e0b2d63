import type { WorkflowResultRow, WorkflowStore } from './database/workflow.store';
import { DatabaseUnavailableError } from './errors/database-unavailable.error';
import { toStatusInfo } from './database/workflow-row';
import { WorkflowCancelledError } from './errors/workflow-cancelled.error';
import { WorkflowFailedError } from './errors/workflow-failed.error';
import { WorkflowNotFoundError } from './errors/workflow-not-found.error';
import { WorkflowResultTimeoutError } from './errors/workflow-result-timeout.error';
import type { EnqueuedWorkflowHandle, GetResultOptions } from './interfaces/workflow-handle.interface';
import type { WorkflowStatusInfo } from './interfaces/workflow-status.interface';
import { fromStoredJson } from './utils/stored-json';
import type { WorkflowCompletions } from './workflow-completions';

const FIRST_POLL_MS = 10;
const MAX_POLL_MS = 500;

/** The `WorkflowHandle` that `QueueService` returns. */
export class QueueWorkflowHandle<R> implements EnqueuedWorkflowHandle<R> {
  constructor(
    readonly workflowId: string,
    private readonly store: WorkflowStore,
    private readonly completions: WorkflowCompletions,
    readonly created: boolean,
  ) {}

  async getStatus(): Promise<WorkflowStatusInfo<R>> {
    const row = await this.store.findRow(this.workflowId);
    if (!row) throw new WorkflowNotFoundError(this.workflowId);
    const status = toStatusInfo(row);
    if (row.status !== 'SUCCESS') return status;
    const stored = await this.store.findResult(this.workflowId);
    return { ...status, result: fromStoredJson<R>(stored?.output ?? null) };
  }

  async getResult(options: GetResultOptions = {}): Promise<R> {
    const deadline = options.timeoutMs === undefined ? Infinity : Date.now() + options.timeoutMs;
    let pollMs = FIRST_POLL_MS;
    for (;;) {
      const row = await this.readResult(deadline);
      switch (row?.status) {
        case 'SUCCESS':
          return fromStoredJson<R>(row.output);
        case 'ERROR':
          throw new WorkflowFailedError(this.workflowId, row.error ?? { name: 'Error', message: 'unknown error' });
        case 'CANCELLED':
        case 'MAX_RECOVERY_ATTEMPTS_EXCEEDED':
          throw new WorkflowCancelledError(this.workflowId, row.status);
      }
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new WorkflowResultTimeoutError(this.workflowId, options.timeoutMs ?? 0);
      await this.completions.waitFor(this.workflowId, Math.min(pollMs, remaining));
      pollMs = Math.min(pollMs * 2, MAX_POLL_MS);
    }
  }

  /** The stored result; undefined while the database is unavailable (waiting goes on until the deadline). */
  private async readResult(deadline: number): Promise<WorkflowResultRow | undefined> {
    let row: WorkflowResultRow | undefined;
    try {
      row = await this.store.findResult(this.workflowId);
    } catch (error) {
      if (error instanceof DatabaseUnavailableError && Date.now() < deadline) return undefined;
      throw error;
    }
    if (!row) throw new WorkflowNotFoundError(this.workflowId);
    return row;
  }
}
