import { Injectable, OnApplicationBootstrap, OnApplicationShutdown } from '@nestjs/common';
import { DedupQueueConfig } from '../dedup-queue.config';
import { LiveExecutor, UnfinishedRunCount, WorkflowVersionStore } from '../database/versions/workflow-versions.store';
import type { StrandedRuns, WorkflowVersionInfo } from '../interfaces/workflow-version.interface';
import { FailureLog } from '../utils/failure-log';
import { ModuleLogger } from '../utils/module-logger';
import { logicalQueueName } from '../utils/queue-shards';

/** What the versions of the workflows look like at `at`: per name and version, and the stranded runs. */
export interface VersionReport {
  at: Date;
  versions: WorkflowVersionInfo[];
  stranded: StrandedRuns[];
}

/** The report is checked this often in a worker process (ten leases, at most a minute), for the log. */
const MAX_CHECK_INTERVAL_MS = 60_000;
/** Live executors are read again for a holder's 409 message once this old. */
const LIVE_EXECUTORS_MAX_AGE_MS = 1000;

/**
 * Which workflow versions have unfinished runs and which live executors register them, for `listVersions()`, the
 * health indicator, the metrics, the dashboard and the 409 message of a key whose holder no one would run. A worker
 * process checks every `checkIntervalMs` and logs one line when the set of stranded runs changes (a warning when
 * some appear, a line when they are gone). Reports are shared by concurrent callers and reused while younger than
 * the age a caller accepts, so that probes and scrapes do not each scan the active table.
 */
@Injectable()
export class WorkflowVersionsMonitor implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new ModuleLogger('DedupQueueScheduler');
  private readonly failures = new FailureLog(this.logger);
  private last?: VersionReport;
  private reading?: Promise<VersionReport>;
  private live?: { at: number; executors: Promise<LiveExecutor[]> };
  private timer?: NodeJS.Timeout;
  /** The stranded runs the last check found, by `strandedKey`: the log tells of those that appear. */
  private told = new Map<string, StrandedRuns>();
  readonly checkIntervalMs: number;

  constructor(
    private readonly config: DedupQueueConfig,
    private readonly store: WorkflowVersionStore,
  ) {
    this.checkIntervalMs = Math.min(MAX_CHECK_INTERVAL_MS, 10 * config.leaseMs);
  }

  onApplicationBootstrap(): void {
    if (!this.config.worker) return;
    this.timer = setInterval(() => void this.check(), this.checkIntervalMs);
    this.timer.unref();
  }

  onApplicationShutdown(): void {
    clearInterval(this.timer);
  }

  /** A report no older than `maxAgeMs` (0: a fresh one). */
  async report(maxAgeMs = 0): Promise<VersionReport> {
    if (this.last && Date.now() - this.last.at.getTime() <= maxAgeMs) return this.last;
    this.reading ??= this.read().finally(() => (this.reading = undefined));
    return this.reading;
  }

  /**
   * Whether a live executor would claim a run of `name` at `version` in `queueName` (read at most a second ago). An
   * executor of a release before 1.1 does not say what it runs, and is taken to run everything.
   */
  async isClaimable(queueName: string, name: string, version: number): Promise<boolean> {
    if (!this.live || Date.now() - this.live.at > LIVE_EXECUTORS_MAX_AGE_MS) {
      const executors = this.store.liveExecutors(this.config.leaseMs);
      this.live = { at: Date.now(), executors };
      executors.catch(() => (this.live = undefined));
    }
    return (await this.live.executors).some((executor) => claims(executor, queueName, name, version));
  }

  /** Checks now and logs what changed in the stranded runs (see the class doc). */
  async check(): Promise<void> {
    let report: VersionReport;
    try {
      report = await this.report();
      this.failures.succeeded();
    } catch (error) {
      this.failures.failed('Checking the workflow versions for stranded runs', error);
      return;
    }
    const now = new Map(report.stranded.map((runs) => [strandedKey(runs), runs]));
    const appeared = [...now.values()].filter((runs) => !this.told.has(strandedKey(runs)));
    const gone = [...this.told.keys()].filter((key) => !now.has(key));
    this.told = now;
    if (appeared.length > 0) {
      this.logger.warn(
        `Unfinished runs that no live executor registers: ${appeared.map(describeStranded).join('; ')}. They keep ` +
          `their keys and wait until a process that registers that name and version (in that queue) starts ` +
          `(queueService.listVersions(), docs/changing-workflows.md)`,
      );
    } else if (gone.length > 0 && now.size === 0) {
      this.logger.log('No unfinished run is left without a live executor that registers it');
    }
  }

  private async read(): Promise<VersionReport> {
    const [executors, runs] = await Promise.all([
      this.store.liveExecutors(this.config.leaseMs),
      this.store.unfinishedRuns(),
    ]);
    this.live = { at: Date.now(), executors: Promise.resolve(executors) };
    this.last = { at: new Date(), versions: versionsOf(executors, runs), stranded: strandedOf(executors, runs) };
    return this.last;
  }
}

/** Whether `executor` claims runs of `name` at `version` in `queueName` (or in the queue of that shard's name). */
function claims(executor: LiveExecutor, queueName: string, name: string, version: number): boolean {
  if (executor.workflows === null) return true;
  return (
    (executor.queues?.includes(logicalQueueName(queueName)) ?? false) &&
    executor.workflows.some((workflow) => workflow.name === name && workflow.version === version)
  );
}

function registers(executor: LiveExecutor, name: string, version: number): boolean {
  return executor.workflows?.some((workflow) => workflow.name === name && workflow.version === version) ?? false;
}

/** Per name and version: the unfinished runs in every queue, and the live executors that register it. */
function versionsOf(executors: LiveExecutor[], runs: UnfinishedRunCount[]): WorkflowVersionInfo[] {
  const versions = new Map<string, WorkflowVersionInfo>();
  const entry = (workflowName: string, version: number) => {
    const key = `${version}:${workflowName}`;
    let info = versions.get(key);
    if (!info) {
      info = {
        workflowName,
        version,
        unfinished: 0,
        executors: executors.filter((executor) => registers(executor, workflowName, version)).length,
      };
      versions.set(key, info);
    }
    return info;
  };
  for (const run of runs)
    entry(run.workflowName, run.version).unfinished += run.waiting + run.running + run.deadLettered;
  for (const executor of executors) for (const { name, version } of executor.workflows ?? []) entry(name, version);
  return [...versions.values()].sort((a, b) => a.workflowName.localeCompare(b.workflowName) || a.version - b.version);
}

/** The queued, delayed or waiting runs that no live executor would claim, a sharded queue's shards added up. */
function strandedOf(executors: LiveExecutor[], runs: UnfinishedRunCount[]): StrandedRuns[] {
  const stranded = new Map<string, StrandedRuns>();
  for (const run of runs) {
    if (
      run.waiting === 0 ||
      executors.some((executor) => claims(executor, run.queueName, run.workflowName, run.version))
    ) {
      continue;
    }
    const entry = { queueName: logicalQueueName(run.queueName), workflowName: run.workflowName, version: run.version };
    const key = strandedKey(entry);
    stranded.set(key, { ...entry, count: (stranded.get(key)?.count ?? 0) + run.waiting });
  }
  return [...stranded.values()].sort(
    (a, b) => a.queueName.localeCompare(b.queueName) || a.workflowName.localeCompare(b.workflowName),
  );
}

function strandedKey(runs: Omit<StrandedRuns, 'count'>): string {
  return JSON.stringify([runs.queueName, runs.workflowName, runs.version]);
}

function describeStranded(runs: StrandedRuns): string {
  return `${runs.count} of "${runs.workflowName}" version ${runs.version} in queue "${runs.queueName}"`;
}
