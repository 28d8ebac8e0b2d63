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

const POSTGRES_SCHEMES = ['postgres', 'postgresql'];
const URL_EXAMPLE = 'postgres://user:password@host:5432/database';

/**
 * What is wrong with a connection URL, or undefined when it is a Postgres URL the module connects with:
 * `postgres://` or `postgresql://` followed by an authority (`user:password@host:port`, all optional), and valid
 * as a whole (a reserved character of the password percent-encoded). Nothing else reaches the driver.
 */
export function postgresUrlProblem(url: string): string | undefined {
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  if (scheme === undefined) return `is not a URL; give ${URL_EXAMPLE}`;
  if (!POSTGRES_SCHEMES.includes(scheme)) {
    return `starts with "${scheme}:"; nest-dedup-queue needs PostgreSQL: postgres:// or postgresql:// (${URL_EXAMPLE})`;
  }
  if (!url.slice(scheme.length + 1).startsWith('//')) {
    return `has no "//" after "${scheme}:"; write ${scheme}://user:password@host:5432/database`;
  }
  if (parseUrl(url) === undefined) {
    return (
      'is not a valid URL; percent-encode the characters of the user name and password that a URL reserves ' +
      '(such as @ : / ? # % and spaces), and give a port of 1 to 65535'
    );
  }
  return undefined;
}

/**
 * The URL for messages, with its password masked: the part between the user name's `:` and the last `@`, and any
 * `password=` parameter. Works on any text (a URL that does not parse included), masking too much rather than too
 * little.
 */
export function maskedUrl(url: string): string {
  const scheme = /^[a-z][a-z0-9+.-]*:\/*/i.exec(url)?.[0] ?? '';
  const rest = url.slice(scheme.length);
  const at = rest.lastIndexOf('@');
  const colon = at < 0 ? -1 : rest.slice(0, at).indexOf(':');
  const masked = colon < 0 ? rest : `${rest.slice(0, colon)}:***${rest.slice(at)}`;
  return (scheme + masked).replace(/([?&]password=)[^&#]*/gi, '$1***');
}

/** Reads the endpoint from a URL and/or separate fields (fields win, as in TypeORM). */
export function describeEndpoint(settings: EndpointSettings | undefined): DatabaseEndpoint {
  const fromUrl = settings?.url ? endpointOfUrl(settings.url) : {};
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

/** NOTE: only from a URL that passes `postgresUrlProblem`: the path of anything else may hold a password. */
function endpointOfUrl(text: string): Partial<DatabaseEndpoint> {
  const url = postgresUrlProblem(text) === undefined ? parseUrl(text) : undefined;
  if (!url) return {};
  const timeout = Number(url.searchParams.get('connect_timeout'));
  return {
    host: decoded(url.hostname) || undefined,
    port: url.port ? Number(url.port) : undefined,
    database: decoded(url.pathname.replace(/^\//, '')) || undefined,
    user: decoded(url.username) || undefined,
    connectTimeoutMs: Number.isFinite(timeout) && timeout > 0 ? timeout * 1000 : undefined,
  };
}

function parseUrl(text: string): URL | undefined {
  try {
    return new URL(text);
  } catch {
    return undefined;
  }
}

function decoded(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
