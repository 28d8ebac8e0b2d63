import { ChildProcess, spawn } from 'node:child_process';
import { existsSync, promises as fs } from 'node:fs';
import * as net from 'node:net';
import { basename, resolve } from 'node:path';
import { startThrowawayPostgres } from 'throwaway-postgres';
import { findFreePort, isRunning, processesUsing, registryDir, RegistryEntry } from 'throwaway-postgres/internals';
import { waitFor } from './support/wait-for';

/**
 * throwaway-postgres never outlives the process that started it: a real demo process (apps/demo/dist/main.js with
 * DATABASE_URL unset) killed with SIGKILL or SIGHUP leaves no server and no data directory, and a server whose
 * owner and watchdog were both killed is reaped by the next start. Asserted on /proc, the filesystem and the port.
 */
describe('throwaway-postgres cleanup', () => {
  const ROOT = resolve(__dirname, '..');
  /** A script for `node -e`: starts a throwaway server and runs until killed. */
  const KEEP_A_SERVER = "require('throwaway-postgres').startThrowawayPostgres(); setInterval(() => {}, 1000)";
  const started: ChildProcess[] = [];

  afterAll(() => {
    for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });

  /** The server a process started (the one at `dataDir` if given), as its registry entry records it. */
  async function serverOf(ownerPid: number, dataDir = ''): Promise<Required<RegistryEntry>> {
    return waitFor(
      async () => {
        for (const name of await fs.readdir(registryDir())) {
          if (!name.startsWith(`${ownerPid}-${basename(dataDir)}`) || !name.endsWith('.json')) continue;
          const entry = JSON.parse(await fs.readFile(resolve(registryDir(), name), 'utf8')) as RegistryEntry;
          if (entry.port !== undefined) return entry as Required<RegistryEntry>;
        }
        return undefined;
      },
      { timeoutMs: 30_000, what: `the registry entry of the server started by ${ownerPid}` },
    );
  }

  function spawnOwner(
    args: string[],
    env: NodeJS.ProcessEnv,
    { ownGroup = false } = {},
  ): { child: ChildProcess; output: () => string } {
    const child = spawn(process.execPath, args, {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: ownGroup,
    });
    started.push(child);
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    return { child, output: () => output };
  }

  async function startDemo(): Promise<{ child: ChildProcess; server: Required<RegistryEntry> }> {
    const env: NodeJS.ProcessEnv = { ...process.env, PORT: String(await findFreePort()), DEMO_TASK_MS: '100' };
    delete env.DATABASE_URL;
    const demo = spawnOwner(['apps/demo/dist/main.js'], env);
    await waitFor(() => demo.output().includes('Listening on'), { timeoutMs: 30_000, what: 'the demo to listen' });
    expect(demo.output()).toContain('Started a throwaway PostgreSQL');
    return { child: demo.child, server: await serverOf(demo.child.pid!) };
  }

  const refusesConnections = (port: number) =>
    new Promise<boolean>((resolveRefused) => {
      const socket = net.connect({ host: '127.0.0.1', port });
      socket.once('connect', () => {
        socket.destroy();
        resolveRefused(false);
      });
      socket.once('error', () => resolveRefused(true));
    });

  const isLeftBehind = (server: Required<RegistryEntry>) =>
    processesUsing(server.dataDir, ['postgres']).length > 0 || existsSync(server.dataDir);

  async function expectNothingLeft(server: Required<RegistryEntry>, what: string): Promise<void> {
    await waitFor(() => !isLeftBehind(server), { timeoutMs: 20_000, what });
    expect(isRunning(server.postmasterPid)).toBe(false);
    expect(await refusesConnections(server.port)).toBe(true);
    await waitFor(() => !isRunning(server.watchdogPid), { timeoutMs: 5000, what: 'the watchdog to exit' });
    const entries = await fs.readdir(registryDir());
    expect(entries.filter((name) => name.includes(basename(server.dataDir)))).toEqual([]);
  }

  it.each(['SIGKILL', 'SIGHUP'] as const)(
    'a demo killed with %s leaves no server and no data directory',
    async (signal) => {
      const { child, server } = await startDemo();
      expect(processesUsing(server.dataDir, ['postgres']).map(({ pid }) => pid)).toEqual([server.postmasterPid]);
      expect(existsSync(server.dataDir)).toBe(true);

      child.kill(signal);
      await waitFor(() => child.signalCode === signal, { what: `the demo to die of ${signal}` });
      const killedAt = Date.now();
      await expectNothingLeft(server, `the server of the demo killed with ${signal} to be gone`);
      console.log(
        `[throwaway-cleanup] ${signal}: server and data directory gone ${Date.now() - killedAt} ms after the kill`,
      );
    },
  );

  it("a SIGKILL to the owner's whole process group (a terminal's processes) leaves nothing either", async () => {
    const owner = spawnOwner(['-e', KEEP_A_SERVER], process.env, { ownGroup: true });
    const server = await serverOf(owner.child.pid!);
    process.kill(-owner.child.pid!, 'SIGKILL');
    await waitFor(() => owner.child.signalCode === 'SIGKILL', { what: 'the owner to die' });
    await expectNothingLeft(server, 'the server of the killed process group to be gone');
  });

  it('a process that returns from its main without stop() exits by itself and leaves nothing', async () => {
    const owner = spawnOwner(
      ['-e', "require('throwaway-postgres').startThrowawayPostgres().then(() => console.log('started'))"],
      process.env,
    );
    const server = await serverOf(owner.child.pid!);
    await waitFor(() => owner.child.exitCode !== null, { timeoutMs: 15_000, what: 'the owner to exit by itself' });
    expect(owner.output()).toContain('started');
    await expectNothingLeft(server, 'the server of the process that exited to be gone');
  });

  it('stop() ends the watchdog too', async () => {
    const server = await startThrowawayPostgres();
    const entry = await serverOf(process.pid, server.dataDir);
    expect(isRunning(entry.watchdogPid)).toBe(true);
    await server.stop();
    await expectNothingLeft(entry, 'the stopped server to be gone');
  });

  it('a server whose owner and watchdog were both killed is reaped by the next start', async () => {
    const owner = spawnOwner(['-e', KEEP_A_SERVER], process.env);
    const orphan = await serverOf(owner.child.pid!);
    process.kill(orphan.watchdogPid, 'SIGKILL');
    await waitFor(() => !isRunning(orphan.watchdogPid), { what: 'the watchdog to die' });
    owner.child.kill('SIGKILL');
    await waitFor(() => owner.child.signalCode === 'SIGKILL', { what: 'the owner to die' });
    expect(isRunning(orphan.postmasterPid)).toBe(true);
    expect(await refusesConnections(orphan.port)).toBe(false);

    const lines: string[] = [];
    const next = await startThrowawayPostgres({ log: (line) => lines.push(line) });
    try {
      expect(isLeftBehind(orphan)).toBe(false);
      expect(isRunning(orphan.postmasterPid)).toBe(false);
      expect(lines).toContain(`[throwaway-postgres] reaped a server whose owner process is gone: ${orphan.dataDir}`);
      expect(await refusesConnections(orphan.port)).toBe(true);
    } finally {
      await next.stop();
    }
  });
});
