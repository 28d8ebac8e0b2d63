import { spawn } from 'child_process';
import * as path from 'path';
import type { Socket } from 'net';
import type { WatchdogOrders } from './watchdog';

/** A running watchdog; see {@link startOwnerWatchdog}. */
export interface OwnerWatchdog {
  readonly pid: number | undefined;
  /** Closes the pipe: the watchdog cleans up whatever is left (usually nothing, after a stop) and exits. */
  release(): void;
}

/** Keeps the pipes' handles referenced from JavaScript for as long as the owner lives. */
const watchdogs = new Set<OwnerWatchdog>();

/**
 * Starts a watchdog process (dist/watchdog.js, run by this Node.js binary) that holds a pipe from this process and,
 * once the pipe closes (this process stopped, exited or was killed, even with SIGKILL), stops the server processes
 * whose command line names one of `orders.directories`, removes those directories and `orders.registryEntry`, and
 * exits. It runs in a session of its own (a terminal's Ctrl-C or hang-up does not reach it) and does not keep this
 * process's event loop alive.
 */
export function startOwnerWatchdog(orders: WatchdogOrders): OwnerWatchdog {
  const child = spawn(process.execPath, [path.join(__dirname, 'watchdog.js'), JSON.stringify(orders)], {
    detached: true,
    stdio: ['pipe', 'ignore', 'ignore'],
    env: {},
  });
  child.on('error', () => undefined);
  child.stdin?.on('error', () => undefined);
  child.unref();
  (child.stdin as unknown as Socket | null)?.unref?.();
  const watchdog: OwnerWatchdog = {
    pid: child.pid,
    release: () => {
      if (!watchdogs.delete(watchdog)) return;
      child.stdin?.destroy();
    },
  };
  watchdogs.add(watchdog);
  return watchdog;
}
