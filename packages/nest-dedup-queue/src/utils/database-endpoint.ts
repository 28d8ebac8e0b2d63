/** The connection settings that say where a connection goes (TypeORM's Postgres options, or a pg config). */
export interface EndpointSettings {
  url?: string;
  host?: string;
  port?: number | string;
  database?: string;
  username?: string;
  user?: string;
}

/** Where a connection goes, for messages: host, port, database and user; never the password. */
export interface DatabaseEndpoint {
  host: string;
  port: number;
  database: string;
  user: string;
  /** `host:port/database`. */
  readonly label: string;
  /** The `connect_timeout` query parameter of the URL (seconds), converted to milliseconds. */
  connectTimeoutMs?: number;
}

/** Reads the endpoint from a URL and/or separate fields (fields win, as in TypeORM). */
export function describeEndpoint(settings: EndpointSettings | undefined): DatabaseEndpoint {
  let fromUrl: Partial<DatabaseEndpoint> = {};
  if (settings?.url) {
    try {
      const url = new URL(settings.url);
      const timeout = Number(url.searchParams.get('connect_timeout'));
      fromUrl = {
        host: decodeURIComponent(url.hostname) || undefined,
        port: url.port ? Number(url.port) : undefined,
        database: decodeURIComponent(url.pathname.replace(/^\//, '')) || undefined,
        user: decodeURIComponent(url.username) || undefined,
        connectTimeoutMs: Number.isFinite(timeout) && timeout > 0 ? timeout * 1000 : undefined,
      };
    } catch {
      fromUrl = {};
    }
  }
  const host = settings?.host ?? fromUrl.host ?? 'localhost';
  const port = Number(settings?.port ?? fromUrl.port ?? 5432);
  const user = settings?.username ?? settings?.user ?? fromUrl.user ?? process.env.PGUSER ?? 'postgres';
  const database = settings?.database ?? fromUrl.database ?? user;
  return {
    host,
    port,
    database,
    user,
    label: `${host}:${port}/${database}`,
    connectTimeoutMs: fromUrl.connectTimeoutMs,
  };
}
