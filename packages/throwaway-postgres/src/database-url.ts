import { startThrowawayPostgres, ThrowawayPostgresOptions } from './throwaway-postgres';

/** A database to connect to, as returned by {@link databaseUrlOrThrowaway}. */
export interface DatabaseUrl {
  /** PostgreSQL connection URL. */
  url: string;
  /** Stops the throwaway server and deletes its data; a no-op for a DATABASE_URL database. Idempotent. */
  stop(): Promise<void>;
  /** True when a throwaway server was started, false when `DATABASE_URL` was used. */
  throwaway: boolean;
}

/**
 * Returns `process.env.DATABASE_URL` when it is set and non-empty (`stop()` is then a no-op);
 * otherwise starts a throwaway server with {@link startThrowawayPostgres}.
 */
export async function databaseUrlOrThrowaway(options?: ThrowawayPostgresOptions): Promise<DatabaseUrl> {
  const configured = process.env.DATABASE_URL;
  if (configured) return { url: configured, stop: () => Promise.resolve(), throwaway: false };
  const server = await startThrowawayPostgres(options);
  return { url: server.url, stop: () => server.stop(), throwaway: true };
}
