/*
 * The processes of a PostgreSQL server, found through /proc: its postmaster (from the data directory's
 * postmaster.pid) and the postmaster's children (backends, background workers, Citus's maintenance daemon), and the
 * CPU they spent, for the Citus benchmarks (bench/citus/).
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

const TICKS = 100;

/** CPU seconds that each of a set of servers spent since the meter was started: `const stop = meter(); … stop()`. */
export type CpuMeter = () => () => number[];

/** The postmaster's PID of the server running on `dataDir`. */
export function postmasterPid(dataDir: string): number {
  return Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
}

/** The fields of /proc/<pid>/stat after the command name (field 3, the state, first), or undefined once it ended. */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

function livePids(): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .map(Number);
}

/** The PIDs of the processes whose parent is `pid` (a postmaster's children: every process of its server). */
export function childPids(pid: number): number[] {
  return livePids().filter((child) => Number(statFields(child)?.[1]) === pid);
}

/** utime + stime, in clock ticks (10 ms), of the postmaster `pid`, its reaped children and its live ones. */
export function postmasterCpuTicks(pid: number): number {
  let ticks = 0;
  for (const child of livePids()) {
    const fields = statFields(child);
    if (!fields) continue;
    if (child === pid) {
      ticks += Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]);
    } else if (Number(fields[1]) === pid) {
      ticks += Number(fields[11]) + Number(fields[12]);
    }
  }
  return ticks;
}

/** utime + stime of the postmaster of `dataDir`, its reaped children and its live ones, in seconds. */
function postgresCpuSeconds(dataDir: string): number {
  return postmasterCpuTicks(postmasterPid(dataDir)) / TICKS;
}

/** A meter of the servers on `dataDirs` read from /proc (clock ticks of 10 ms). */
export function procCpuMeter(dataDirs: readonly string[]): CpuMeter {
  return () => {
    const before = dataDirs.map(postgresCpuSeconds);
    return () => dataDirs.map((dir, i) => postgresCpuSeconds(dir) - before[i]);
  };
}
