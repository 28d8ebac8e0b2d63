import { randomBytes } from 'node:crypto';
import { Pool } from 'pg';

/** The database the suite runs against, set by the global setup. */
export function databaseUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is not set; run the suite through jest (its global setup sets it)');
  return url;
}

/** The URL of another database on the suite's server, optionally as another user (without a password). */
export function databaseUrlOf(database: string, user?: string): string {
  const url = new URL(databaseUrl());
  url.pathname = `/${database}`;
  if (user) {
    url.username = user;
    url.password = '';
  }
  return url.toString();
}

/** A schema name no other test file uses, so each file's tables are its own. */
export function uniqueSchema(prefix: string): string {
  return `t_${prefix}_${randomBytes(4).toString('hex')}`.toLowerCase();
}

/** A small pool for assertions and fixtures (on the test database, or on `url`), with the error listener it needs. */
export function testPool(url = databaseUrl()): Pool {
  const pool = new Pool({ connectionString: url, max: 4 });
  pool.on('error', () => undefined);
  return pool;
}

export async function dropSchema(pool: Pool, schema: string): Promise<void> {
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
}
