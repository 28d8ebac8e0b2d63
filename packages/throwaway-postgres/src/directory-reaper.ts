import { promises as fs } from 'fs';
import * as path from 'path';
import { processesUsing } from './process-table';

/** Server programs whose processes a reaped directory may have; others are never signalled. */
export const SERVER_PROGRAMS = ['postgres', 'pgbouncer'] as const;

const GRACE_MS = 2000;
const POLL_MS = 25;

/**
 * Stops every server process started with `directory` (or a path inside it) as an argument, and removes the
 * directory. A PostgreSQL postmaster gets SIGQUIT (immediate shutdown: its backends go with it), other servers
 * SIGTERM; whatever still runs after 2 s gets SIGKILL. Only programs named in {@link SERVER_PROGRAMS} whose command
 * line names the directory are signalled, so an unrelated process that reuses a pid is left alone.
 */
export async function reapDirectory(directory: string): Promise<void> {
  const resolved = path.resolve(directory);
  const running = () => processesUsing(resolved, SERVER_PROGRAMS);
  for (const { pid, argv } of running()) signal(pid, path.basename(argv[0]) === 'postgres' ? 'SIGQUIT' : 'SIGTERM');
  if (!(await until(() => running().length === 0, GRACE_MS))) {
    for (const { pid } of running()) signal(pid, 'SIGKILL');
    await until(() => running().length === 0, GRACE_MS);
  }
  await fs.rm(resolved, { recursive: true, force: true, maxRetries: 3 });
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch {
    // Already gone.
  }
}

async function until(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  for (const deadline = Date.now() + timeoutMs; !condition();) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
  return true;
}
