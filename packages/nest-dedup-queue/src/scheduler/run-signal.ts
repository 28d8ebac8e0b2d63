import { type InterruptReason, WorkflowInterruptedError } from '../errors/workflow-interrupted.error';
import type { RunControl } from './body-runner';

/**
 * The abort signal of one run, made when something first reads it (most bodies never do): aborted before that, it
 * is made aborted with the first reason. The first reason stays. It is the run's `RunControl`.
 */
export class RunSignal implements RunControl {
  private controller?: AbortController;
  private reason?: WorkflowInterruptedError;

  constructor(private readonly workflowId: string) {}

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.reason) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  get aborted(): boolean {
    return this.reason !== undefined;
  }

  interrupt(reason: InterruptReason): void {
    if (this.reason) return;
    this.reason = new WorkflowInterruptedError(this.workflowId, reason);
    this.controller?.abort(this.reason);
  }
}
