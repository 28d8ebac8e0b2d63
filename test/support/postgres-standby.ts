import { join } from 'node:path';
import { waitFor } from './wait-for';
import { launchPostgres, serverPrograms, TestPostgresServer } from './postgres-server';

/** A streaming standby of a test primary; a {@link TestPostgresServer} that can also be promoted. */
export interface PostgresStandby extends TestPostgresServer {
  /** `pg_ctl promote`, then waits until the server accepts writes (`pg_is_in_recovery()` is false). */
  promote(): Promise<void>;
}

export interface PostgresStandbyOptions {
  /**
   * Default true: the primary gets `synchronous_standby_names = '*'`, so a commit is acknowledged only once this
   * standby has it, and a failover to it loses no acknowledged transaction.
   */
  synchronous?: boolean;
}

/**
 * Starts a streaming standby of `primary` (a server from `startPostgresServer` with the Debian binaries, which have
 * pg_basebackup): `pg_basebackup -R -X stream` into a directory of its own, on a free port; resolves once the
 * primary reports it streaming (and, when synchronous, as its synchronous standby).
 */
export async function startPostgresStandby(
  primary: TestPostgresServer,
  { synchronous = true }: PostgresStandbyOptions = {},
): Promise<PostgresStandby> {
  const programs = await serverPrograms('debian');
  const standby = await launchPostgres(programs, 'pg-standby', { hot_standby: 'on' }, async (directory, dataDir) => {
    await directory.run(join(programs.binDir, 'pg_basebackup'), [
      ...['-h', '127.0.0.1', '-p', String(primary.port), '-U', 'postgres', '-D', dataDir],
      ...['-R', '-X', 'stream', '-c', 'fast', '--no-sync'],
    ]);
  });
  if (synchronous) {
    await primary.query(`ALTER SYSTEM SET synchronous_standby_names = '*'`);
    await primary.query('SELECT pg_reload_conf()');
  }
  await waitFor(
    async () => {
      const rows = await primary.query<{ sync_state: string }>(
        `SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'`,
      );
      return rows.some((row) => (synchronous ? row.sync_state === 'sync' : true));
    },
    { timeoutMs: 30_000, what: 'the standby to stream from the primary' },
  );
  return Object.assign(standby, {
    async promote(): Promise<void> {
      await standby.pgCtl(['-t', '60', 'promote']);
      await waitFor(
        async () =>
          (await standby.query<{ recovery: boolean }>('SELECT pg_is_in_recovery() AS recovery'))[0].recovery === false,
        { timeoutMs: 30_000, what: 'the promoted standby to accept writes' },
      );
    },
  });
}
