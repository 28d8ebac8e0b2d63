/** Something to shut down if the process ends while it is still running. */
export interface ExitCleanup {
  /** Graceful shutdown, used on SIGINT/SIGTERM when no one else handles the signal. */
  stop(): Promise<void>;
  /** Synchronous best effort, used on process 'exit' where asynchronous work never completes. */
  stopSync(): void;
}

const registered = new Set<ExitCleanup>();
const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];

/**
 * Registers `cleanup` until the returned function is called.
 *
 * On 'exit', every registered cleanup's `stopSync()` runs. On SIGINT/SIGTERM, if no other listener
 * handles that signal, all cleanups `stop()` and the signal is raised again so the process still
 * terminates the way it would have; if the application has its own listener, it owns the shutdown
 * (which ends in `stop()` or in 'exit').
 */
export function registerExitCleanup(cleanup: ExitCleanup): () => void {
  if (registered.size === 0) install();
  registered.add(cleanup);
  return () => {
    if (registered.delete(cleanup) && registered.size === 0) uninstall();
  };
}

function install(): void {
  process.on('exit', onExit);
  for (const signal of signals) process.on(signal, onSignal);
}

function uninstall(): void {
  process.removeListener('exit', onExit);
  for (const signal of signals) process.removeListener(signal, onSignal);
}

function onExit(): void {
  for (const cleanup of [...registered]) {
    try {
      cleanup.stopSync();
    } catch {
      // Keep going: the other servers still need stopping.
    }
  }
  registered.clear();
}

function onSignal(signal: NodeJS.Signals): void {
  if (process.listenerCount(signal) > 1) return;
  for (const s of signals) process.removeListener(s, onSignal);
  void Promise.allSettled([...registered].map((cleanup) => cleanup.stop())).then(() => {
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  });
}
