/**
 * Jest globalTeardown: stops the throwaway server started by global-setup (a no-op when the suite
 * used DATABASE_URL) and restores DATABASE_URL, so a following watch-mode run starts a fresh one.
 */
export default async function globalTeardown(): Promise<void> {
  const database = globalThis.__testDatabase;
  if (!database) return;
  globalThis.__testDatabase = undefined;
  if (database.throwaway) {
    if (database.previousDatabaseUrl === undefined) delete process.env.DATABASE_URL;
    else process.env.DATABASE_URL = database.previousDatabaseUrl;
  }
  await database.stop();
}
