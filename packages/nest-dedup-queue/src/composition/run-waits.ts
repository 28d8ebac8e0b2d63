import type { MessageStore } from '../database/messages/message.store';
import type { RecordedStep, StepStore } from '../database/steps/step.store';
import type { EventTarget, OwnedRun, WaitingStore } from '../database/waiting/waiting.store';
import type { WorkflowEventStore } from '../database/events/workflow-event.store';
import type { FramedExecution } from '../execution/execution-frames';
import type { WorkflowExecution } from '../execution/workflow-execution';
import { abortableDelay } from '../utils/backoff';
import { reviveError } from '../utils/error-info';
import { fromStoredJson } from '../utils/stored-json';

/**
 * A wait shorter than this is spent in the process, holding the slot (suspending and waking again costs about
 * five statements and a claim); a longer one suspends the workflow.
 */
export const IN_PROCESS_WAIT_MS = 1000;
/** While a `recv` waits in the process (its timeout is near), how often it looks for its message. */
const RECV_POLL_MS = 100;
/** While a `getEvent` waits in the process, how often it looks for its value: from the first to the last. */
const GET_EVENT_POLL_MS = { first: 10, max: 500 };

/** The step names that `sleep`, `recv` and `getEvent` record at their positions. */
export const SLEEP_STEP = 'sleep';
export const RECV_DEADLINE_STEP = 'recv deadline';
export const RECV_STEP = 'recv';
export const GET_EVENT_DEADLINE_STEP = 'getEvent deadline';
/** The step name of a `getEvent` of `key`: what it returned. */
export function getEventStep(key: string): string {
  return `getEvent ${key}`;
}

/** What a run's waits need from the module. */
export interface RunWaitsDependencies {
  waiting: WaitingStore;
  messages: MessageStore;
  events: WorkflowEventStore;
  steps: StepStore;
  executorId: string;
  /** A workflow of `queueName` was suspended until `inMs` from now: make it due then. */
  expectWakeUp(queueName: string, inMs: number): void;
}

/**
 * The durable waits (`sleep`, `recv`, `getEvent`) of one run of one workflow. Each records what it decides at its step position
 * (a wake-up time, a deadline, the message received), so that a re-executed workflow gets the same outcome at the
 * same point. A wait that outlasts `IN_PROCESS_WAIT_MS` suspends the workflow: its row becomes WAITING (key kept, no
 * executor, no slot) and `suspended` is called, which ends the run for its worker; the body's promise never settles.
 */
export class RunWaits {
  private readonly run: OwnedRun;
  /** The database's clock minus this process's, once read. */
  private clockOffsetMs?: number;

  constructor(
    private readonly execution: WorkflowExecution,
    private readonly deps: RunWaitsDependencies,
    /** Called once the run is suspended. */
    private readonly suspended: () => void,
  ) {
    const { workflowId, attempt } = execution.context;
    this.run = { queueName: execution.storedQueueName, workflowId, attempt, executorId: deps.executorId };
  }

  async sleep(ms: number): Promise<void> {
    const wakeAt = await this.recordedTime(SLEEP_STEP, ms);
    const remaining = await this.remainingMs(wakeAt);
    if (remaining <= 0) return;
    if (remaining < IN_PROCESS_WAIT_MS) return abortableDelay(remaining, this.execution.context.signal);
    if (!(await this.deps.waiting.suspend(this.run, timestampOrNull(wakeAt), null, null))) {
      throw this.execution.ownershipLost();
    }
    return this.suspendRun(remaining);
  }

  async recv<T>(topic: string, timeoutMs: number): Promise<T | undefined> {
    const deadline = await this.recordedTime(RECV_DEADLINE_STEP, Number.isFinite(timeoutMs) ? timeoutMs : null);
    const { index, recorded } = this.execution.takePosition();
    if (recorded) return this.replayed<T>(index, RECV_STEP, recorded);
    for (;;) {
      const inbox = await this.deps.messages.inbox(this.run, topic);
      if (!inbox) throw this.execution.ownershipLost();
      if (inbox.hasMessage) {
        const received = await this.deps.messages.receive(this.deps.steps, this.run, index, RECV_STEP, topic);
        if (received === undefined) throw this.execution.ownershipLost();
        if (received !== null) return fromStoredJson<T>(received);
        continue;
      }
      const remaining = await this.remainingMs(deadline);
      if (remaining <= 0) return this.recordOutcome<T>(index, RECV_STEP, null);
      if (remaining < IN_PROCESS_WAIT_MS) {
        await abortableDelay(Math.min(remaining, RECV_POLL_MS), this.execution.context.signal);
        continue;
      }
      if (await this.deps.waiting.suspend(this.run, timestampOrNull(deadline), topic, inbox.messagesSent)) {
        return this.suspendRun(remaining);
      }
    }
  }

  /**
   * `QueueService.getEvent` in a workflow body: its deadline and what it returns are recorded at the next positions,
   * as `recv`'s are. Waiting for more than `IN_PROCESS_WAIT_MS`, the workflow is suspended (WAITING, key kept, no
   * slot) and registered as a waiter of the event, whose `setEvent` makes it due; so is its deadline. A workflow
   * that does not exist yet has nothing to register with (its queue is unknown): the wait stays in the process,
   * looking again from every 10 ms to every 500 ms, until it exists or the deadline passes.
   */
  async getEvent<T>(workflowId: string, key: string, timeoutMs: number): Promise<T | undefined> {
    const deadline = await this.recordedTime(GET_EVENT_DEADLINE_STEP, Number.isFinite(timeoutMs) ? timeoutMs : null);
    const { index, recorded } = this.execution.takePosition();
    const name = getEventStep(key);
    if (recorded) return this.replayed<T>(index, name, recorded);
    let target: EventTarget | undefined;
    for (let pollMs = GET_EVENT_POLL_MS.first; ; pollMs = Math.min(pollMs * 2, GET_EVENT_POLL_MS.max)) {
      const queueName = target?.queueName ?? (await this.deps.events.queueOf(workflowId));
      target = queueName === undefined ? undefined : { queueName, workflowId, key };
      const found = target && (await this.deps.events.get(target.queueName, workflowId, key));
      if (found) return this.recordOutcome<T>(index, name, found.valueJson, target);
      const remaining = await this.remainingMs(deadline);
      if (remaining <= 0) return this.recordOutcome<T>(index, name, null, target);
      if (remaining < IN_PROCESS_WAIT_MS || !target) {
        await abortableDelay(Math.min(remaining, pollMs), this.execution.context.signal);
        continue;
      }
      if (!(await this.deps.waiting.suspendForEvent(this.run, timestampOrNull(deadline), target))) {
        throw this.execution.ownershipLost();
      }
      if (await this.deps.events.get(target.queueName, workflowId, key)) await this.deps.waiting.wakeOwn(this.run);
      return this.suspendRun(remaining);
    }
  }

  /**
   * Records what a `recv` or `getEvent` returns at its position (`outputJson`, JSON text; null: it timed out, and
   * resolves with undefined), and a `getEvent`'s registration as a waiter is forgotten.
   */
  private async recordOutcome<T>(
    index: number,
    name: string,
    outputJson: string | null,
    target?: EventTarget,
  ): Promise<T | undefined> {
    const checkpoint = {
      workflowId: this.run.workflowId,
      queueName: this.run.queueName,
      index,
      name,
      outputJson,
      error: null,
      durationMs: 0,
    };
    if (!(await this.deps.steps.record(checkpoint, this.run.executorId, this.run.attempt))) {
      throw this.execution.ownershipLost();
    }
    if (target && this.run.attempt > 1) await this.deps.waiting.forgetEventWait(this.run, target);
    return fromStoredJson<T>(outputJson);
  }

  /**
   * The time recorded at the next position (epoch milliseconds; null for none): recorded now, `ms` from the
   * database's clock, or as an earlier run recorded it.
   */
  private async recordedTime(name: string, ms: number | null): Promise<number | null> {
    const { index, recorded } = this.execution.takePosition();
    if (recorded) return timeOf(this.replayed<string | undefined>(index, name, recorded));
    const json = await this.deps.waiting.recordTime(this.run, index, name, ms);
    if (json === undefined) throw this.execution.ownershipLost();
    const at = timeOf(fromStoredJson<string | undefined>(json));
    // NOTE: the database's clock read `ms` before `at`, a round trip ago at most: close enough for a wait.
    if (at !== null && ms !== null) this.clockOffsetMs ??= at - ms - Date.now();
    return at;
  }

  private replayed<T>(index: number, name: string, recorded: RecordedStep): T {
    if (recorded.name !== name) throw this.execution.mismatchAt(index, recorded.name, name);
    if (recorded.error) throw reviveError(recorded.error);
    return fromStoredJson<T>(recorded.output);
  }

  /** Milliseconds until `at` by the database's clock (Infinity for no time). */
  private async remainingMs(at: number | null): Promise<number> {
    if (at === null) return Infinity;
    this.clockOffsetMs ??= (await this.deps.waiting.now()) - Date.now();
    return at - (Date.now() + this.clockOffsetMs);
  }

  private suspendRun(remainingMs: number): Promise<never> {
    if (Number.isFinite(remainingMs)) this.deps.expectWakeUp(this.run.queueName, remainingMs);
    this.suspended();
    return new Promise<never>(() => undefined);
  }
}

const waitsOfRuns = new WeakMap<FramedExecution, RunWaits>();

/** Makes `sleep` and `recv` available to the code of `execution`'s run. */
export function attachRunWaits(execution: WorkflowExecution, waits: RunWaits): void {
  waitsOfRuns.set(execution, waits);
}

/** The waits of the run `execution` belongs to; undefined for a run started without them. */
export function runWaitsOf(execution: FramedExecution): RunWaits | undefined {
  return waitsOfRuns.get(execution);
}

function timeOf(recorded: string | null | undefined): number | null {
  return typeof recorded === 'string' ? Date.parse(recorded) : null;
}

/** A wake-up time as the suspension stores it: null for none (a wait without a timeout). */
function timestampOrNull(at: number | null): string | null {
  return at === null ? null : new Date(at).toISOString();
}
