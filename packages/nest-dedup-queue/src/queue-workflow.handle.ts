import type { WorkflowReadStore, WorkflowResultRow } from './database/workflows/reads/workflow-reads.store';
import { DatabaseUnavailableError } from './errors/database-unavailable.error';
import { toStatusInfo } from './database/workflows/workflow-row';
import { WorkflowCancelledError } from './errors/workflow-cancelled.error';
import { WorkflowFailedError } from './errors/workflow-failed.error';
import { WorkflowNotFoundError } from './errors/workflow-not-found.error';
import { WorkflowResultTimeoutError } from './errors/workflow-result-timeout.error';
import type { EnqueuedWorkflowHandle, GetResultOptions } from './interfaces/workflow-handle.interface';
import { FINISHED_WORKFLOW_STATUSES, type WorkflowStatusInfo } from './interfaces/workflow-status.interface';
import { executionFrames } from './execution/execution-frames';
import { fromStoredJson } from './utils/stored-json';
import type { WorkflowCompletions } from './workflow-completions';

const FIRST_POLL_MS = 10;
const MAX_POLL_MS = 500;

/** The `WorkflowHandle` that `QueueService` returns. */
export class QueueWorkflowHandle<R> implements EnqueuedWorkflowHandle<R> {
  constructor(
    readonly workflowId: string,
    private readonly store: WorkflowReadStore,
    private readonly completions: WorkflowCompletions,
    readonly created: boolean,
    /** The workflow's queue when the handle's maker knew it: its look-ups then name it. */
    private readonly queueName?: string,
  ) {}

  async getStatus(): Promise<WorkflowStatusInfo<R>> {
    const row = await this.store.findRow(this.workflowId, this.queueName);
    if (!row) throw new WorkflowNotFoundError(this.workflowId);
    const status = toStatusInfo(row);
    if (row.status !== 'SUCCESS') return status;
    const stored = await this.store.findResult(this.workflowId, this.queueName);
    return { ...status, result: fromStoredJson<R>(stored?.output ?? null) };
  }

  /**
   * Waits for the workflow's result. Awaited inside a running workflow (outside a step), the outcome is recorded at
   * the caller's position: a re-executed caller gets the same result or error at once, and its wait ends when the
   * caller is cancelled or interrupted.
   */
  async getResult(options: GetResultOptions = {}): Promise<R> {
    const frame = executionFrames.getStore();
    if (!frame || frame.inStep) return this.toResult(await this.waitForOutcome(options));
    const { signal } = frame.execution.context;
    const outcome = await frame.execution.runStep(
      `getResult ${this.workflowId}`,
      () => this.waitForOutcome(options, signal),
      {},
    );
    return this.toResult(outcome);
  }

  /** Waits until the workflow finished (or the deadline passed, or `signal` aborted) and gives its stored outcome. */
  private async waitForOutcome(options: GetResultOptions, signal?: AbortSignal): Promise<WorkflowResultRow> {
    const deadline = options.timeoutMs === undefined ? Infinity : Date.now() + options.timeoutMs;
    let pollMs = FIRST_POLL_MS;
    for (;;) {
      signal?.throwIfAborted();
      const row = await this.readResult(deadline);
      if (row && FINISHED_WORKFLOW_STATUSES.includes(row.status) && !row.parked) return row;
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new WorkflowResultTimeoutError(this.workflowId, options.timeoutMs ?? 0);
      await this.completions.waitFor(this.workflowId, Math.min(pollMs, remaining));
      pollMs = Math.min(pollMs * 2, MAX_POLL_MS);
    }
  }

  private toResult(row: WorkflowResultRow): R {
    switch (row.status) {
      case 'SUCCESS':
        return fromStoredJson<R>(row.output);
      case 'ERROR':
        throw new WorkflowFailedError(this.workflowId, row.error ?? { name: 'Error', message: 'unknown error' });
      default:
        throw new WorkflowCancelledError(this.workflowId, row.status);
    }
  }

  /** The stored result; undefined while the database is unavailable (waiting goes on until the deadline). */
  private async readResult(deadline: number): Promise<WorkflowResultRow | undefined> {
    let row: WorkflowResultRow | undefined;
    try {
      row = await this.store.findResult(this.workflowId, this.queueName);
    } catch (error) {
      if (error instanceof DatabaseUnavailableError && Date.now() < deadline) return undefined;
      throw error;
    }
    if (!row) throw new WorkflowNotFoundError(this.workflowId);
    return row;
  }
}
