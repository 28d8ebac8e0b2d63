/**
 * The watchdog process of a throwaway server (see owner-watchdog.ts): `node watchdog.js '<json WatchdogOrders>'`.
 * It reads its stdin, a pipe from the owner, until it closes (the owner stopped, exited or died by any means), then
 * stops the server processes using the guarded directories, removes those directories and the registry entry, and
 * exits. It ignores SIGINT and SIGHUP (a terminal's Ctrl-C or hang-up must not end it before it has cleaned up); a
 * SIGTERM or SIGKILL ends it at once, and the registry's reaping at the next start cleans up instead.
 */
import { promises as fs } from 'fs';
import { reapDirectory } from './directory-reaper';

/** What the watchdog cleans up once its owner is gone. */
export interface WatchdogOrders {
  directories: string[];
  registryEntry?: string;
}

async function cleanUp(orders: WatchdogOrders): Promise<void> {
  await Promise.allSettled(orders.directories.map((directory) => reapDirectory(directory)));
  if (orders.registryEntry) await fs.rm(orders.registryEntry, { force: true }).catch(() => undefined);
}

function main(): void {
  const orders = JSON.parse(process.argv[2] ?? '{}') as WatchdogOrders;
  for (const signal of ['SIGINT', 'SIGHUP'] as const) process.on(signal, () => undefined);
  let started = false;
  const ownerGone = () => {
    if (started) return;
    started = true;
    void cleanUp(orders).finally(() => process.exit(0));
  };
  process.stdin.on('data', () => undefined);
  process.stdin.once('end', ownerGone);
  process.stdin.once('close', ownerGone);
  process.stdin.once('error', ownerGone);
}

if (require.main === module) main();
