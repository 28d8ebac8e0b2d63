import { ChildProcess, execFile, spawn } from 'node:child_process';
import { cp, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Pool } from 'pg';
import { findFreePort } from 'throwaway-postgres/internals';
import { databaseUrl, testPool, uniqueSchema } from './support/database';
import { brokenLinks } from './support/doc-links';
import { DocsBlock, docsBlocks, multiFileExamples, oneFileApp } from './support/docs-examples';
import { describeWithRegistry } from './support/system-tools';

const run = promisify(execFile);

const ROOT = path.resolve(__dirname, '..');
const LIBRARY = path.join(ROOT, 'packages/nest-dedup-queue');
/** The fresh application's dependencies: what a user would install for NestJS 11, without `@types/pg`. */
const APP_DEPENDENCIES = {
  '@nestjs/common': '11.2.10',
  '@nestjs/core': '11.2.10',
  '@nestjs/platform-express': '11.2.10',
  pg: '8.23.1',
  'reflect-metadata': '0.2.2',
  rxjs: '7.8.2',
  typeorm: '1.1.1',
};
/** `nest new` puts these in every app; `@types/node` is what `process.env` needs. */
const APP_DEV_DEPENDENCIES = { '@types/node': '20.19.43', typescript: '5.9.3' };
/** What the examples of `docs/` import besides the library (the versions of the root `package.json`). */
const DOCS_DEPENDENCIES = {
  '@nestjs/terminus': '11.1.1',
  '@nestjs/typeorm': '11.0.3',
  'prom-client': '15.1.3',
  knex: '3.3.0',
  kysely: '0.28.19',
  'drizzle-orm': '0.45.4',
};
/** What `fromPg` needs in strict TypeScript (the docs say so), installed for the docs' blocks after the app compiled. */
const PG_TYPES = '@types/pg@8.23.1';
/**
 * The blocks that are not compiled, by page (`<!-- docs-check: fragment: REASON -->`): the README's one-line
 * summary, production.md's `main.ts` (it imports the project's own `./app.module`), and transactions.md's Prisma
 * example (it needs the application's generated client). Every other block compiles on its own.
 */
const FRAGMENT_PAGES = ['README.md', 'docs/production.md', 'docs/transactions.md'];

/** A strict application's compiler options, and no `skipLibCheck`: the package's declarations are checked too. */
const APP_TSCONFIG = {
  compilerOptions: {
    target: 'ES2022',
    module: 'commonjs',
    strict: true,
    experimentalDecorators: true,
    emitDecoratorMetadata: true,
    outDir: 'dist',
    rootDir: 'src',
    types: ['node'],
  },
  include: ['src'],
};
/**
 * The docs' blocks, each a module of its own (`moduleDetection: force`), so that no block sees what another declares,
 * compiled with the application's options and nothing else: no preamble, no declarations of ours. With
 * `skipLibCheck`, as `nest new` writes it: drizzle-orm's declarations do not compile without it (its MySQL and
 * SQLite parts), and the package's own are checked without it by the application's compile.
 */
const DOCS_TSCONFIG = {
  extends: './tsconfig.json',
  compilerOptions: { noEmit: true, rootDir: '.', moduleDetection: 'force', skipLibCheck: true },
  include: ['docs-check'],
};
/**
 * A file beside the blocks that uses a class one block declares (`AdminGuard`, docs/dashboard.md) without importing
 * it: its one error shows that every block is compiled on its own.
 */
const ISOLATION_CANARY = { file: 'docs-check/isolation-canary.ts', code: 'export const guard = AdminGuard;\n' };

/** Resolves once `url` answers at all (the application listens), polling every 100 ms for up to `ms`. */
async function answering(url: string, app: ChildProcess, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    if (app.exitCode !== null) throw new Error(`the application exited with code ${app.exitCode}`);
    try {
      await fetch(url);
      return;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

describeWithRegistry('the packed package in a fresh NestJS 11 application', () => {
  let workDir: string;
  let tarball: string;
  let packedFiles: string[];
  let pool: Pool;
  let database: string;
  let app: ChildProcess | undefined;
  let appOutput = '';
  let exampleFiles = new Map<string, string>();
  let blocks: DocsBlock[] = [];

  beforeAll(async () => {
    workDir = await mkdtemp(path.join(tmpdir(), 'nest-dedup-queue-packed-'));
    pool = testPool();
    database = uniqueSchema('packed');
    await pool.query(`CREATE DATABASE "${database}"`);

    // NOTE: packed from a copy, so that its prepack build never rewrites the dist/ other suites are loading.
    const copy = path.join(workDir, 'repo');
    const copiedLibrary = path.join(copy, 'packages/nest-dedup-queue');
    await cp(LIBRARY, copiedLibrary, {
      recursive: true,
      filter: (source) => !/[/\\](dist|node_modules)$/.test(source),
    });
    for (const file of ['README.md', 'CHANGELOG.md', 'tsconfig.base.json', 'docs']) {
      await cp(path.join(ROOT, file), path.join(copy, file), { recursive: true });
    }
    await symlink(path.join(ROOT, 'node_modules'), path.join(copy, 'node_modules'));
    const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', workDir], {
      cwd: copiedLibrary,
      maxBuffer: 16 * 1024 * 1024,
    });
    const [packed] = JSON.parse(stdout.slice(stdout.indexOf('['))) as { filename: string; files: { path: string }[] }[];
    tarball = path.join(workDir, packed.filename);
    packedFiles = packed.files.map((file) => file.path);

    const appDir = path.join(workDir, 'app');
    await mkdir(path.join(appDir, 'src'), { recursive: true });
    const manifest = {
      name: 'fresh-nest-app',
      private: true,
      dependencies: { ...APP_DEPENDENCIES, 'nest-dedup-queue': `file:${tarball}` },
      devDependencies: { ...APP_DEV_DEPENDENCIES, ...DOCS_DEPENDENCIES },
    };
    await writeFile(path.join(appDir, 'package.json'), JSON.stringify(manifest, null, 2));
    await writeFile(path.join(appDir, 'tsconfig.json'), JSON.stringify(APP_TSCONFIG, null, 2));
    await writeFile(path.join(appDir, 'tsconfig.docs.json'), JSON.stringify(DOCS_TSCONFIG, null, 2));
    await writeFile(path.join(appDir, 'src/main.ts'), await oneFileApp(ROOT));
    exampleFiles = await multiFileExamples(ROOT);
    blocks = await docsBlocks(ROOT);
    const docsFiles = blocks.flatMap((block) => (block.file ? [[block.file, block.code ?? '']] : []));
    for (const [file, code] of [...exampleFiles, ...docsFiles, [ISOLATION_CANARY.file, ISOLATION_CANARY.code]]) {
      await mkdir(path.dirname(path.join(appDir, file)), { recursive: true });
      await writeFile(path.join(appDir, file), code);
    }
    await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline'], { cwd: appDir });
  }, 180_000);

  afterAll(async () => {
    if (app && app.exitCode === null) {
      const exited = new Promise((resolve) => app?.once('exit', resolve));
      app.kill('SIGTERM');
      await exited;
    }
    await pool?.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    await pool?.end();
    if (workDir) await rm(workDir, { recursive: true, force: true });
  });

  it('holds the README, the docs, LICENSE, CHANGELOG and the built entry, and no sources or tests', async () => {
    const pages = (await readdir(path.join(ROOT, 'docs'))).map((file) => `docs/${file}`);
    expect(pages).toContain('docs/api.md');
    expect(packedFiles).toEqual(
      expect.arrayContaining([
        'README.md',
        ...pages,
        'LICENSE',
        'CHANGELOG.md',
        'package.json',
        'dist/index.js',
        'dist/index.d.ts',
      ]),
    );
    expect(packedFiles.filter((file) => /^src\/|(^|\/)test\/|\.spec\.|\.e2e-spec\.|tsconfig/.test(file))).toEqual([]);
  });

  it('finds the multi-file examples: Using it, and registerQueue with @InjectQueue', () => {
    expect([...exampleFiles.keys()].sort()).toEqual(
      [
        'src/examples/register-queue/audio.controller.ts',
        'src/examples/register-queue/audio.module.ts',
        'src/examples/register-queue/audio.tasks.ts',
        'src/examples/using-it/app.module.ts',
        'src/examples/using-it/process.controller.ts',
        'src/examples/using-it/user-tasks.service.ts',
        'src/examples/using-it/users.service.ts',
      ].map((file) => path.normalize(file)),
    );
  });

  it("finds the docs' code blocks; only the listed fragments are not compiled, each with its reason", () => {
    const compiled = blocks.filter((block) => block.kind === 'module');
    expect(compiled.length).toBeGreaterThanOrEqual(35);
    expect([...new Set(compiled.map((block) => block.source.split(':')[0]))]).toEqual(
      expect.arrayContaining(['docs/deduplication.md', 'docs/transactions.md', 'docs/streams.md']),
    );
    const fragments = blocks.filter((block) => block.kind === 'fragment');
    expect(fragments.map((fragment) => fragment.source.split(':')[0])).toEqual(FRAGMENT_PAGES);
    for (const fragment of fragments) expect(fragment.reason).toMatch(/\w{3,}/);
  });

  it('ships Markdown whose every relative link resolves to a file in the package', async () => {
    const unpacked = path.join(workDir, 'unpacked');
    await mkdir(unpacked);
    await run('tar', ['-xzf', tarball, '-C', unpacked]);
    const markdown = packedFiles.filter((file) => file.endsWith('.md'));
    expect(markdown).toEqual(expect.arrayContaining(['README.md', 'CHANGELOG.md', 'docs/upgrading.md']));
    expect(brokenLinks(path.join(unpacked, 'package'), markdown)).toEqual([]);
  });

  it('installs without @types/pg, and the one-file app and the multi-file examples compile with tsc --strict', async () => {
    const appDir = path.join(workDir, 'app');
    const installed = JSON.parse(
      await readFile(path.join(appDir, 'node_modules/nest-dedup-queue/package.json'), 'utf8'),
    );
    expect(installed.exports['.']).toEqual({ types: './dist/index.d.ts', default: './dist/index.js' });
    await expect(readFile(path.join(appDir, 'node_modules/@types/pg/package.json'))).rejects.toMatchObject({
      code: 'ENOENT',
    });

    const compiled = await run('npx', ['tsc', '-p', 'tsconfig.json'], { cwd: appDir }).catch(
      (error: { stdout?: string; message: string }) => ({ stdout: error.stdout ?? error.message }),
    );
    expect(compiled.stdout).toBe('');
  }, 150_000);

  it("compiles every other block of the docs on its own, as it is, with @types/pg (fromPg's types)", async () => {
    const appDir = path.join(workDir, 'app');
    await run('npm', ['install', '--no-save', '--no-audit', '--no-fund', '--prefer-offline', PG_TYPES], {
      cwd: appDir,
    });
    const compiled = await run('npx', ['tsc', '-p', 'tsconfig.docs.json'], { cwd: appDir }).catch(
      (error: { stdout?: string; message: string }) => ({ stdout: error.stdout ?? error.message }),
    );
    expect(compiled.stdout.trim().split('\n')).toEqual([
      `${ISOLATION_CANARY.file}(1,22): error TS2304: Cannot find name 'AdminGuard'.`,
    ]);
  }, 150_000);

  it('runs the example: 201, a duplicate answered 409 over HTTP, then the workflow SUCCESS', async () => {
    const appDir = path.join(workDir, 'app');
    const port = await findFreePort();
    const url = new URL(databaseUrl());
    url.pathname = `/${database}`;
    app = spawn(process.execPath, ['dist/main.js'], {
      cwd: appDir,
      env: { ...process.env, DATABASE_URL: url.toString(), PORT: String(port) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    app.stdout?.on('data', (chunk: Buffer) => (appOutput += chunk.toString()));
    app.stderr?.on('data', (chunk: Buffer) => (appOutput += chunk.toString()));
    const base = `http://127.0.0.1:${port}`;
    await answering(base, app, 30_000).catch((error: Error) => {
      throw new Error(`${error.message}\n${appOutput}`);
    });

    const first = await fetch(`${base}/process/u1`, { method: 'POST' });
    expect(first.status).toBe(201);
    const { workflow_id: workflowId } = (await first.json()) as { workflow_id: string };
    const duplicate = await fetch(`${base}/process/u1`, { method: 'POST' });
    expect(duplicate.status).toBe(409);
    expect(await duplicate.json()).toMatchObject({
      statusCode: 409,
      queueName: 'user_tasks',
      deduplicationId: 'u1',
      existingWorkflowId: workflowId,
    });

    let status: { status: string; queueName?: string; result?: unknown } | undefined;
    const deadline = Date.now() + 30_000;
    while (status?.status !== 'SUCCESS' && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      status = (await (await fetch(`${base}/workflows/${workflowId}`)).json()) as { status: string };
    }
    expect(status).toMatchObject({ status: 'SUCCESS', queueName: 'user_tasks', result: 'processed u1' });
    const again = await fetch(`${base}/process/u1`, { method: 'POST' });
    expect(again.status).toBe(201);
  }, 90_000);
});
