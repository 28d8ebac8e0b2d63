import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';

const ROOT = resolve(__dirname, '../..');
const SCHEMA = resolve(ROOT, 'test/fixtures/prisma/schema.prisma');
const OUTPUT = resolve(ROOT, '.generated/prisma-client/client');

/** The part of the generated client (`test/fixtures/prisma/schema.prisma`) the suites use. */
export interface TestPrismaClient {
  $transaction<T>(work: (tx: TestPrismaTransaction) => Promise<T>, options?: { timeout?: number }): Promise<T>;
  $disconnect(): Promise<void>;
}

/** An interactive transaction of `TestPrismaClient`. */
export interface TestPrismaTransaction {
  $queryRawUnsafe(query: string, ...values: unknown[]): Promise<unknown>;
  order: { create(args: { data: { id: string } }): Promise<unknown> };
}

let generated: (new (options: { adapter: unknown }) => TestPrismaClient) | undefined;

/**
 * Runs `prisma generate` (once per process) and returns the generated `PrismaClient` class. NOTE: generating needs
 * no engine binary (Prisma 7's client runs its query compiler as WebAssembly), but the CLI insists on downloading
 * the schema engine first, which cannot work offline: PRISMA_SCHEMA_ENGINE_BINARY names a stand-in that generate
 * never runs (/bin/false, which would fail loudly if it did).
 */
export function generatedPrismaClient(): new (options: { adapter: unknown }) => TestPrismaClient {
  if (!generated) {
    execFileSync(resolve(ROOT, 'node_modules/.bin/prisma'), ['generate', '--schema', SCHEMA], {
      cwd: ROOT,
      env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/false', CHECKPOINT_DISABLE: '1' },
      stdio: 'pipe',
    });
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- generated at run time, after typechecking
    generated = (require(OUTPUT) as { PrismaClient: typeof generated }).PrismaClient;
  }
  return generated!;
}
