import { constants as fsConstants, promises as fs } from 'fs';
import * as os from 'os';
import * as path from 'path';
import { reapDirectory } from './directory-reaper';
import { isRunning, startTimeOf } from './process-table';

/** What the registry knows about one throwaway server; one JSON file per server. */
export interface RegistryEntry {
  /** The process that started the server, and its start time (so that a reused pid is not mistaken for it). */
  ownerPid: number;
  ownerStartTime?: number;
  /** The data directory (a `throwaway-postgres-data-*` directory directly under `os.tmpdir()`). */
  dataDir: string;
  watchdogPid?: number;
  port?: number;
  postmasterPid?: number;
}

/** This process's entry in the registry. */
export interface RegistryRecord {
  readonly file: string;
  update(changes: Partial<RegistryEntry>): Promise<void>;
  remove(): Promise<void>;
}

export const DATA_DIR_PREFIX = 'throwaway-postgres-data-';

/** Unreadable or staging files older than this are from a writer that died mid-write. */
const UNREADABLE_ENTRY_MAX_AGE_MS = 60_000;

/** The registry directory: `os.tmpdir()/throwaway-postgres-registry-<uid>`, private to this user. */
export function registryDir(): string {
  return path.join(os.tmpdir(), `throwaway-postgres-registry-${process.getuid?.() ?? 'user'}`);
}

/** Records a server this process is starting, before anything is created for it. */
export async function registerServer(dataDir: string): Promise<RegistryRecord> {
  const dir = await openRegistryDir();
  const file = path.join(dir, `${process.pid}-${path.basename(dataDir)}.json`);
  let entry: RegistryEntry = { ownerPid: process.pid, ownerStartTime: startTimeOf(process.pid), dataDir };
  await writeEntry(file, entry);
  return {
    file,
    update: async (changes) => {
      entry = { ...entry, ...changes };
      await writeEntry(file, entry);
    },
    remove: () => fs.rm(file, { force: true }),
  };
}

/**
 * Stops and deletes the servers whose owner process is gone (killed with SIGKILL while its watchdog was killed too,
 * or a machine that went down mid-run), and removes their entries. Returns the data directories it reaped.
 */
export async function reapOrphanedServers(): Promise<string[]> {
  const dir = await openRegistryDir();
  const reaped: string[] = [];
  for (const name of await fs.readdir(dir)) {
    const file = path.join(dir, name);
    if (!name.endsWith('.json')) {
      if (await isOlderThan(file, UNREADABLE_ENTRY_MAX_AGE_MS)) await fs.rm(file, { force: true });
      continue;
    }
    const entry = await readEntry(file);
    if (entry === 'unreadable') {
      if (await isOlderThan(file, UNREADABLE_ENTRY_MAX_AGE_MS)) await fs.rm(file, { force: true });
      continue;
    }
    if (!entry || isRunning(entry.ownerPid, entry.ownerStartTime)) continue;
    if (isThrowawayDataDir(entry.dataDir)) {
      await reapDirectory(entry.dataDir);
      reaped.push(entry.dataDir);
    }
    await fs.rm(file, { force: true });
  }
  return reaped;
}

/** Only directories this package creates are ever deleted on the word of a registry file. */
function isThrowawayDataDir(dataDir: unknown): dataDir is string {
  return (
    typeof dataDir === 'string' &&
    path.dirname(dataDir) === os.tmpdir() &&
    path.basename(dataDir).startsWith(DATA_DIR_PREFIX)
  );
}

async function openRegistryDir(): Promise<string> {
  const dir = registryDir();
  await fs.mkdir(dir, { mode: 0o700, recursive: true });
  const stat = await fs.lstat(dir);
  const openToOthers = (stat.mode & (fsConstants.S_IWGRP | fsConstants.S_IWOTH)) !== 0;
  if (!stat.isDirectory() || stat.uid !== process.getuid?.() || openToOthers) {
    throw new Error(`throwaway-postgres: ${dir} is not a directory owned by this user and closed to others; remove it`);
  }
  return dir;
}

async function writeEntry(file: string, entry: RegistryEntry): Promise<void> {
  const staging = `${file}.${process.pid}.tmp`;
  await fs.writeFile(staging, JSON.stringify(entry), { mode: 0o600 });
  await fs.rename(staging, file);
}

async function readEntry(file: string): Promise<RegistryEntry | 'unreadable' | undefined> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch {
    return undefined;
  }
  try {
    const entry = JSON.parse(text) as RegistryEntry;
    return Number.isInteger(entry.ownerPid) ? entry : 'unreadable';
  } catch {
    return 'unreadable';
  }
}

async function isOlderThan(file: string, ageMs: number): Promise<boolean> {
  const stat = await fs.stat(file).catch(() => undefined);
  return stat !== undefined && Date.now() - stat.mtimeMs > ageMs;
}
