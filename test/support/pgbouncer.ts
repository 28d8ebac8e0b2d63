import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Client } from 'pg';
import { findFreePort } from 'throwaway-postgres/internals';
import { createServerDirectory, serverAccount, ServerDirectory } from './server-directory';
import { SYSTEM_TOOLS } from './system-tools';
import { waitFor } from './wait-for';

export interface PgBouncerOptions {
  /** The PostgreSQL server (on 127.0.0.1) that every database name is forwarded to. */
  serverPort: number;
  /** Default `transaction`. */
  poolMode?: 'transaction' | 'session';
  /** Extra `[pgbouncer]` settings, overriding the defaults (e.g. `{ default_pool_size: '5' }`). */
  settings?: Record<string, string>;
}

/** A running PgBouncer of the test's own. */
export interface PgBouncer {
  readonly port: number;
  /** `postgres://postgres@127.0.0.1:<port>/postgres`, through the pooler. */
  readonly url: string;
  /** The server port it forwards to now. */
  readonly serverPort: number;
  /**
   * Points every database at the server on `serverPort` (rewrites `[databases]` and sends `RELOAD`): new server
   * connections go there; connections to the old server are closed once released.
   */
  retarget(serverPort: number): Promise<void>;
  /** Runs a command on the admin console (database `pgbouncer`), e.g. `SHOW POOLS`. */
  admin<Row = Record<string, unknown>>(command: string): Promise<Row[]>;
  /** Stops PgBouncer at once (SIGTERM) and deletes its files. Idempotent; also happens when the test process ends. */
  stop(): Promise<void>;
}

/**
 * Defaults chosen for tests that take servers away: a failed server login is retried after 1 s (not 15), a client
 * waits at most 10 s for a server connection, and connecting to a server gives up after 3 s.
 */
const DEFAULT_SETTINGS: Record<string, string> = {
  listen_addr: '127.0.0.1',
  unix_socket_dir: '',
  auth_type: 'trust',
  admin_users: 'postgres',
  max_client_conn: '500',
  default_pool_size: '20',
  ignore_startup_parameters: 'extra_float_digits,options',
  server_login_retry: '1',
  server_connect_timeout: '3',
  query_wait_timeout: '10',
  log_connections: '0',
  log_disconnections: '0',
};

/**
 * Starts PgBouncer (`/usr/sbin/pgbouncer`, run as the `postgres` OS user when we are root: it refuses root) on a
 * free loopback port with its ini, auth file, log and pid file in a directory of its own.
 */
export async function startPgBouncer(options: PgBouncerOptions): Promise<PgBouncer> {
  const directory = await createServerDirectory('pgbouncer-test', serverAccount('postgres'));
  try {
    const port = await findFreePort();
    const bouncer = new TestPgBouncer(directory, port, options);
    await bouncer.start();
    return bouncer;
  } catch (error) {
    await directory.dispose();
    throw error;
  }
}

class TestPgBouncer implements PgBouncer {
  readonly url: string;
  private target: number;

  constructor(
    private readonly directory: ServerDirectory,
    readonly port: number,
    private readonly options: PgBouncerOptions,
  ) {
    this.url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    this.target = options.serverPort;
  }

  get serverPort(): number {
    return this.target;
  }

  async start(): Promise<void> {
    await writeFile(join(this.directory.path, 'userlist.txt'), '"postgres" ""\n');
    await this.writeIni();
    try {
      await this.directory.run(SYSTEM_TOOLS.pgbouncer, ['-d', this.iniFile]);
      await waitFor(() => this.admin('SHOW VERSION'), { timeoutMs: 10_000, what: 'PgBouncer to accept connections' });
    } catch (error) {
      const log = await readFile(join(this.directory.path, 'pgbouncer.log'), 'utf8').catch(() => '');
      throw new Error(`${(error as Error).message}\n--- pgbouncer log ---\n${log}`);
    }
  }

  async retarget(serverPort: number): Promise<void> {
    this.target = serverPort;
    await this.writeIni();
    await this.admin('RELOAD');
  }

  async admin<Row = Record<string, unknown>>(command: string): Promise<Row[]> {
    const client = new Client({ host: '127.0.0.1', port: this.port, user: 'postgres', database: 'pgbouncer' });
    client.on('error', () => undefined);
    await client.connect();
    try {
      return (await client.query(command)).rows as Row[];
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  stop(): Promise<void> {
    return this.directory.dispose();
  }

  private get iniFile(): string {
    return join(this.directory.path, 'pgbouncer.ini');
  }

  private async writeIni(): Promise<void> {
    const dir = this.directory.path;
    const settings: Record<string, string> = {
      ...DEFAULT_SETTINGS,
      listen_port: String(this.port),
      pool_mode: this.options.poolMode ?? 'transaction',
      auth_file: join(dir, 'userlist.txt'),
      logfile: join(dir, 'pgbouncer.log'),
      pidfile: join(dir, 'pgbouncer.pid'),
      ...this.options.settings,
    };
    const lines = [
      '[databases]',
      `* = host=127.0.0.1 port=${this.target}`,
      '[pgbouncer]',
      ...Object.entries(settings).map(([name, value]) => `${name} = ${value}`),
    ];
    await writeFile(this.iniFile, `${lines.join('\n')}\n`);
  }
}
