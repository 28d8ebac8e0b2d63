import { spawn, spawnSync, SpawnOptions } from 'node:child_process';
import { chown, mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { reapDirectory, startOwnerWatchdog } from 'throwaway-postgres/internals';

/** The OS account a test server runs as (PostgreSQL and PgBouncer refuse to run as root). */
export interface ServerAccount {
  uid: number;
  gid: number;
}

/**
 * A temporary directory holding one test server's files (data directory, configuration, log, pid file), owned by
 * the account the server runs as. A watchdog process (throwaway-postgres's) stops every server process whose command
 * line names the directory and deletes it once this test process ends in any way, SIGKILL included; `dispose()` does
 * the same at once.
 */
export interface ServerDirectory {
  readonly path: string;
  readonly account: ServerAccount | undefined;
  /** Runs `command` as the directory's account in the directory; rejects with its output if it fails. */
  run(command: string, args: string[], options?: { timeoutMs?: number }): Promise<string>;
  /** Stops the server processes that use the directory (SIGQUIT / SIGTERM, then SIGKILL) and deletes it. */
  dispose(): Promise<void>;
}

/** The account of `name` (e.g. `postgres`) when this process runs as root; undefined otherwise (run as ourselves). */
export function serverAccount(name: string): ServerAccount | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string) => Number(spawnSync('id', [flag, name], { encoding: 'utf8' }).stdout.trim());
  const account = { uid: id('-u'), gid: id('-g') };
  if (!Number.isInteger(account.uid) || account.uid <= 0) throw new Error(`test servers: no OS user "${name}"`);
  return account;
}

export async function createServerDirectory(
  prefix: string,
  account: ServerAccount | undefined,
): Promise<ServerDirectory> {
  const path = await mkdtemp(join(tmpdir(), `${prefix}-`));
  if (account) await chown(path, account.uid, account.gid);
  const watchdog = startOwnerWatchdog({ directories: [path] });
  let disposing: Promise<void> | undefined;
  return {
    path,
    account,
    run: (command, args, options) => run(command, args, { cwd: path, ...account }, options?.timeoutMs),
    dispose: () => (disposing ??= reapDirectory(path).finally(() => watchdog.release())),
  };
}

function run(command: string, args: string[], spawnOptions: SpawnOptions, timeoutMs = 60_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...spawnOptions, env: serverEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`${command}: ${error.message}`));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(output);
      else reject(new Error(`${command} ${args.join(' ')} failed (${signal ?? `code ${code}`}):\n${output}`));
    });
  });
}

/** The environment without the test's PG* variables and locale, so that tools see only their arguments. */
function serverEnv(): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH, LC_ALL: 'C', LANG: 'C' };
}
