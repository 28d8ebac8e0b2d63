import { databaseUrlOrThrowaway, DatabaseUrl } from 'throwaway-postgres';

declare global {
  /** The suite's database, kept by global-setup for global-teardown (both run in jest's parent process). */
  var __testDatabase: (DatabaseUrl & { previousDatabaseUrl: string | undefined }) | undefined;
}

/**
 * Jest globalSetup: uses DATABASE_URL when set, otherwise starts a throwaway PostgreSQL server and
 * exports its URL as DATABASE_URL (jest workers are started afterwards and inherit it).
 */
export default async function globalSetup(): Promise<void> {
  const previousDatabaseUrl = process.env.DATABASE_URL;
  const database = await databaseUrlOrThrowaway();
  process.env.DATABASE_URL = database.url;
  globalThis.__testDatabase = { ...database, previousDatabaseUrl };
  const where = database.throwaway
    ? `a throwaway PostgreSQL server at ${database.url}`
    : `DATABASE_URL (${redact(database.url)})`;
  console.log(`\n[test] database: ${where}`);
}

function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '<unparseable URL>';
  }
}
