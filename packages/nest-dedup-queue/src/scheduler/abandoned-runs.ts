import type { Logger } from '@nestjs/common';
import type { AbandonedRunInfo } from '../interfaces/abandoned-run.interface';

/** A cancelled body still running this long after its slot was freed is reported as abandoned. */
const ABANDONED_WARNING_AFTER_MS = 1000;
/** Later reminders that an abandoned body still runs: at 1 minute, then each time its age doubles, at least hourly. */
const ABANDONED_REMINDER = { firstMs: 60_000, maxIntervalMs: 3_600_000 };

/** The run an abandoned body belongs to, as the worker knows it. */
export interface AbandonableRun {
  workflowId: string;
  workflowName: string;
}

interface AbandonedRun {
  run: AbandonableRun;
  reason: 'cancelled' | 'timed-out';
  abandonedAt: number;
  warned: boolean;
  reminder?: NodeJS.Timeout;
}

/**
 * The bodies of one queue's cancelled or timed-out runs that go on after their slot was freed (they ignore their
 * signal): listed by `abandonedRuns()`, warned about once if still running a second later, reminded of at 1 minute
 * and each time their age doubles (at least hourly), and logged once more when they finally return.
 */
export class AbandonedRuns {
  private readonly runs = new Map<AbandonableRun, AbandonedRun>();

  constructor(
    private readonly queueName: string,
    private readonly logger: Logger,
  ) {}

  add(run: AbandonableRun, reason: 'cancelled' | 'timed-out'): void {
    const abandoned: AbandonedRun = { run, reason, abandonedAt: Date.now(), warned: false };
    this.runs.set(run, abandoned);
    this.remindLater(abandoned, ABANDONED_WARNING_AFTER_MS);
  }

  /** The run's body returned (or was stopped): if it was abandoned, it no longer is. */
  returned(run: AbandonableRun): void {
    const abandoned = this.runs.get(run);
    if (!abandoned) return;
    this.runs.delete(run);
    clearTimeout(abandoned.reminder);
    if (abandoned.warned) {
      const age = seconds(Date.now() - abandoned.abandonedAt);
      this.logger.log(`The abandoned body of workflow ${describe(run)} returned after ${age}`);
    }
  }

  list(): AbandonedRunInfo[] {
    const now = Date.now();
    return [...this.runs.values()].map(({ run, reason, abandonedAt }) => ({
      workflowId: run.workflowId,
      queueName: this.queueName,
      workflowName: run.workflowName,
      reason,
      abandonedAt: new Date(abandonedAt),
      abandonedForMs: now - abandonedAt,
    }));
  }

  private remindLater(abandoned: AbandonedRun, delayMs: number): void {
    abandoned.reminder = setTimeout(() => this.remind(abandoned), delayMs);
    abandoned.reminder.unref();
  }

  private remind(abandoned: AbandonedRun): void {
    const ageMs = Date.now() - abandoned.abandonedAt;
    const what = abandoned.reason === 'timed-out' ? 'timed out' : 'was cancelled';
    this.logger.warn(
      abandoned.warned
        ? `The abandoned body of workflow ${describe(abandoned.run)} is still running, ${seconds(ageMs)} after ` +
            `it ${what}`
        : `Workflow ${describe(abandoned.run)} ${what} but its body ignores its signal and is still running after ` +
            `${seconds(ageMs)}; its slot is freed and its outcome will be ignored (abandoned)`,
    );
    abandoned.warned = true;
    const { firstMs, maxIntervalMs } = ABANDONED_REMINDER;
    const next = ageMs < firstMs ? firstMs : Math.min(ageMs * 2, ageMs + maxIntervalMs);
    this.remindLater(abandoned, next - ageMs);
  }
}

function describe(run: AbandonableRun): string {
  return `${run.workflowName} (${run.workflowId})`;
}

function seconds(ms: number): string {
  return ms < 60_000 ? `${Math.round(ms / 1000)} s` : `${Math.round(ms / 60_000)} min`;
}
