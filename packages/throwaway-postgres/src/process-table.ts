import { readdirSync, readFileSync } from 'fs';
import * as path from 'path';

/** What /proc tells about a running process. */
export interface ProcessInfo {
  readonly pid: number;
  /** The arguments it was started with (`argv[0]` first); a PostgreSQL postmaster keeps its own, its backends do not. */
  readonly argv: string[];
}

/** The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), or undefined if it is gone. */
export function startTimeOf(pid: number): number | undefined {
  const stat = readProc(pid, 'stat');
  if (stat === undefined) return undefined;
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (fields[0] === 'Z' || fields[0] === 'X') return undefined;
  return Number(fields[19]);
}

/** True while `pid` runs and, when `startTime` is given, is still the process that had that start time (no reuse). */
export function isRunning(pid: number, startTime?: number): boolean {
  const actual = startTimeOf(pid);
  return actual !== undefined && (startTime === undefined || actual === startTime);
}

/** The command line of `pid`, or undefined if it is gone (or a zombie, whose command line is empty). */
export function argvOf(pid: number): string[] | undefined {
  const cmdline = readProc(pid, 'cmdline');
  if (!cmdline) return undefined;
  return cmdline.replace(/\0$/, '').split('\0');
}

/**
 * The running processes started from one of `programs` (compared by file name, e.g. `postgres`) with an argument
 * that is `directory` or a path inside it, such as a postmaster's `-D <directory>` or `pgbouncer <directory>/x.ini`.
 */
export function processesUsing(directory: string, programs: readonly string[]): ProcessInfo[] {
  const found: ProcessInfo[] = [];
  for (const entry of safeReaddir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    const argv = argvOf(pid);
    if (argv && usesDirectory(argv, directory, programs)) found.push({ pid, argv });
  }
  return found;
}

/** True when `argv` is one of `programs` started with `directory` (or a path inside it) as an argument. */
export function usesDirectory(argv: string[], directory: string, programs: readonly string[]): boolean {
  if (!programs.includes(path.basename(argv[0] ?? ''))) return false;
  const inside = directory.endsWith(path.sep) ? directory : directory + path.sep;
  return argv.slice(1).some((arg) => arg === directory || arg.startsWith(inside));
}

function readProc(pid: number, file: string): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/${file}`, 'utf8');
  } catch {
    return undefined;
  }
}

function safeReaddir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
