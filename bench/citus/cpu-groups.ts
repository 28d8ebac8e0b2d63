/*
 * CPU cgroups (v1) for the Citus scale-out benchmark (bench/citus/scale.ts): one group per PostgreSQL server in the
 * `cpu` hierarchy, holding it to a quota (`cpu.cfs_quota_us` per `cpu.cfs_period_us`), and one of the same name in
 * the `cpuacct` hierarchy, whose `cpuacct.usage` is the CPU every process of the server spent, reaped ones included.
 */
import { appendFileSync, existsSync, mkdirSync, readFileSync, readdirSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { childPids, CpuMeter } from './server-processes';

const CPU_ROOT = '/sys/fs/cgroup/cpu';
const CPUACCT_ROOT = '/sys/fs/cgroup/cpuacct';
const PERIOD_US = 100_000;
/** Every group this benchmark makes is named `<prefix>-<the benchmark's PID>-<server>`. */
const PREFIX = 'nest-dedup-queue-citus-scale';

/** Why this machine cannot hold servers in CPU cgroups, or undefined when it can. */
export function cpuGroupsUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'not running as root';
  if (!existsSync(join(CPU_ROOT, 'cpu.cfs_quota_us'))) return `no cgroup v1 cpu hierarchy at ${CPU_ROOT}`;
  if (!existsSync(join(CPUACCT_ROOT, 'cpuacct.usage'))) return `no cgroup v1 cpuacct hierarchy at ${CPUACCT_ROOT}`;
  return undefined;
}

/** The groups an earlier run left (its process ended without cleaning up): removed. Returns their names. */
export function removeStaleGroups(): string[] {
  const stale = readdirSync(CPU_ROOT).filter((name) => {
    const owner = new RegExp(`^${PREFIX}-(\\d+)-`).exec(name)?.[1];
    return owner !== undefined && !existsSync(`/proc/${owner}`);
  });
  for (const name of stale) removeGroup(name);
  return stale;
}

function removeGroup(name: string): void {
  for (const root of [CPU_ROOT, CPUACCT_ROOT]) {
    const dir = join(root, name);
    if (!existsSync(dir)) continue;
    // A process still inside (a server stopping) goes back to the root group, or the directory cannot be removed.
    for (const pid of readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) {
      try {
        appendFileSync(join(root, 'cgroup.procs'), pid);
      } catch {
        // it ended meanwhile
      }
    }
    rmdirSync(dir);
  }
}

/** One server's pair of groups (`cpu` and `cpuacct`). */
export class CpuGroup {
  readonly name: string;
  private removed = false;

  /**
   * Creates the groups, `quota` CPUs each (e.g. 0.3: 30,000 µs per 100,000 µs period; 0: no quota, the group only
   * counts), no process in them yet.
   */
  constructor(
    server: string,
    private readonly quota: number,
  ) {
    this.name = `${PREFIX}-${process.pid}-${server}`;
    for (const root of [CPU_ROOT, CPUACCT_ROOT]) mkdirSync(join(root, this.name));
    writeFileSync(join(CPU_ROOT, this.name, 'cpu.cfs_period_us'), String(PERIOD_US));
    this.limit(true);
  }

  /** Puts the quota on (`true`) or lifts it (`false`: the server's set-up work, which is not measured). */
  limit(on: boolean): void {
    const quotaUs = on && this.quota > 0 ? String(Math.round(this.quota * PERIOD_US)) : '-1';
    writeFileSync(join(CPU_ROOT, this.name, 'cpu.cfs_quota_us'), quotaUs);
  }

  /**
   * Moves a server's postmaster into the groups, then every child it has (the processes it forks afterwards are
   * born inside), and checks that each of them is inside. Returns how many processes it placed.
   */
  place(postmaster: number): number {
    const pids = [postmaster];
    this.move(postmaster);
    for (const child of childPids(postmaster)) {
      this.move(child);
      pids.push(child);
    }
    const outside = [postmaster, ...childPids(postmaster)].filter((pid) => !this.holds(pid));
    if (outside.length) throw new Error(`cgroup ${this.name}: processes ${outside.join(', ')} are not inside`);
    return pids.length;
  }

  /** The CPU seconds the group's processes spent (`cpuacct.usage`), since the group was made. */
  usageSeconds(): number {
    return Number(readFileSync(join(CPUACCT_ROOT, this.name, 'cpuacct.usage'), 'utf8')) / 1e9;
  }

  /** Periods elapsed and periods in which the quota stopped the group (`cpu.stat`), since the group was made. */
  throttling(): { periods: number; throttled: number } {
    const stat = readFileSync(join(CPU_ROOT, this.name, 'cpu.stat'), 'utf8');
    const field = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(stat)?.[1] ?? 0);
    return { periods: field('nr_periods'), throttled: field('nr_throttled') };
  }

  /** Moves what is left inside back to the root groups and removes both. Idempotent. */
  remove(): void {
    if (this.removed) return;
    this.removed = true;
    removeGroup(this.name);
  }

  private move(pid: number): void {
    for (const root of [CPU_ROOT, CPUACCT_ROOT]) {
      try {
        appendFileSync(join(root, this.name, 'cgroup.procs'), String(pid));
      } catch (error) {
        if (existsSync(`/proc/${pid}`)) throw error;
      }
    }
  }

  private holds(pid: number): boolean {
    let membership: string;
    try {
      membership = readFileSync(`/proc/${pid}/cgroup`, 'utf8');
    } catch {
      return true; // it ended
    }
    const lines = membership.split('\n');
    return ['cpu', 'cpuacct'].every((hierarchy) => lines.some((line) => line.endsWith(`:${hierarchy}:/${this.name}`)));
  }
}

/** A meter of the servers held by `groups`, from their `cpuacct.usage`. */
export function groupCpuMeter(groups: readonly CpuGroup[]): CpuMeter {
  return () => {
    const before = groups.map((group) => group.usageSeconds());
    return () => groups.map((group, i) => group.usageSeconds() - before[i]);
  };
}
