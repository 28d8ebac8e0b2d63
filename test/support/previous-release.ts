/**
 * The previous release of nest-dedup-queue, built from git for the upgrade test (and bench/upgrade/measure.js):
 * `git archive <commit>` of the package's sources into `test/.previous-release/<commit>/` (gitignored), compiled
 * with the repository's own TypeScript, so that Node resolves @nestjs/*, pg, typeorm, ... from the repository's
 * node_modules by walking up. Cached by commit: a second run finds `dist/` and a `.built` marker and does nothing.
 * The package.json is left out of the archive (jest's module map would see a second package named
 * nest-dedup-queue); the fixtures require `dist/index.js` and `dist/testing.js` by path.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

/** A release of nest-dedup-queue that the upgrade tests build from git. */
export interface Release {
  version: string;
  commit: string;
}

/** 0.2.0 (unreleased in the CHANGELOG): the last commit before migration 013 (`storage`). */
export const PREVIOUS_RELEASE = { version: '0.2.0', commit: '53ce303' } as const satisfies Release;

/** 1.0.0, the release before 1.1 (its migrations end at 018): main's last commit before this round's work. */
export const RELEASE_1_0 = { version: '1.0.0', commit: '8f612a1' } as const satisfies Release;

/** 1.1.0, the release before 1.2 (its migrations end at 022): main's last commit before src/database was regrouped. */
export const RELEASE_1_1 = { version: '1.1.0', commit: 'd7f04bc' } as const satisfies Release;

const ROOT = resolve(__dirname, '../..');
const CACHE = join(ROOT, 'test', '.previous-release');
const PACKAGE = 'packages/nest-dedup-queue';
const ARCHIVED = [`${PACKAGE}/src`, `${PACKAGE}/tsconfig.json`, `${PACKAGE}/tsconfig.build.json`, 'tsconfig.base.json'];

/** Set by `.ci/run`: a suite whose tools are missing fails instead of skipping (as in system-tools.ts). */
const REQUIRED = process.env.REQUIRE_SYSTEM_TOOLS === '1';

/** The built package's directory (holding `dist/`), e.g. `<root>/test/.previous-release/53ce303/packages/...`. */
export function previousReleaseDir(commit: string = PREVIOUS_RELEASE.commit): string {
  return join(CACHE, commit, PACKAGE);
}

/** Why the previous release cannot be built here (no git, not a git checkout, the commit missing), or undefined. */
export function previousReleaseUnavailable(
  commit: string = PREVIOUS_RELEASE.commit,
  version: string = PREVIOUS_RELEASE.version,
): string | undefined {
  if (isBuilt(commit)) return undefined;
  const git = spawnSync('git', ['rev-parse', '--verify', '--quiet', `${commit}^{commit}`], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  if (git.error) return `needs git to build release ${commit} from history (${git.error.message})`;
  if (git.status !== 0) {
    return (
      `needs commit ${commit} (nest-dedup-queue ${version}) in this checkout's git history ` +
      `(a shallow clone lacks it: git fetch --unshallow)${git.stderr ? `: ${git.stderr.trim()}` : ''}`
    );
  }
  const tar = spawnSync('tar', ['--version'], { encoding: 'utf8' });
  if (tar.error) return `needs tar to unpack release ${commit} (${tar.error.message})`;
  return undefined;
}

/**
 * Builds the previous release unless it is built already; returns its package directory. Safe when two processes
 * build at once: each builds in a directory of its own and renames it into place (the loser's is dropped).
 */
export function buildPreviousRelease(commit: string = PREVIOUS_RELEASE.commit): string {
  const target = join(CACHE, commit);
  if (isBuilt(commit)) return previousReleaseDir(commit);
  const unavailable = previousReleaseUnavailable(commit);
  if (unavailable) throw new Error(unavailable);
  const work = `${target}.building-${process.pid}`;
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  try {
    const archive = spawnSync('git', ['archive', '--format=tar', commit, ...ARCHIVED], {
      cwd: ROOT,
      maxBuffer: 256 * 1024 * 1024,
    });
    if (archive.status !== 0) throw new Error(`git archive ${commit} failed: ${String(archive.stderr)}`);
    run('tar', ['-x', '-C', work], archive.stdout);
    const packageDir = join(work, PACKAGE);
    run(process.execPath, [
      join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'),
      '-p',
      join(packageDir, 'tsconfig.build.json'),
    ]);
    // The package's own build script does the same: the dashboard's page is served from dist/.
    const statics = join(packageDir, 'src', 'dashboard', 'static');
    if (existsSync(statics)) cpSync(statics, join(packageDir, 'dist', 'dashboard', 'static'), { recursive: true });
    writeFileSync(join(work, '.built'), `${commit}\n`);
    if (isBuilt(commit)) return previousReleaseDir(commit);
    rmSync(target, { recursive: true, force: true });
    renameSync(work, target);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return previousReleaseDir(commit);
}

/**
 * `describe` for a suite that needs a release built from git (the previous one by default). Where it cannot be
 * built (no git, the commit missing) the suite says so and skips, except under `REQUIRE_SYSTEM_TOOLS=1` (CI), where
 * it fails with the same message.
 */
export function describeWithPreviousRelease(name: string, body: () => void, release: Release = PREVIOUS_RELEASE): void {
  const unavailable = previousReleaseUnavailable(release.commit, release.version);
  if (!unavailable) {
    describe(name, body);
    return;
  }
  const message = `${name}: ${unavailable}`;
  if (REQUIRED) {
    describe(name, () => {
      it('has the previous release it needs', () => {
        throw new Error(message);
      });
    });
    return;
  }
  console.warn(`[skip] ${message}`);
  describe.skip(name, body);
}

function isBuilt(commit: string): boolean {
  return existsSync(join(CACHE, commit, '.built')) && existsSync(join(previousReleaseDir(commit), 'dist', 'index.js'));
}

function run(command: string, args: string[], input?: Buffer): void {
  const result = spawnSync(command, args, { cwd: ROOT, input, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (result.status !== 0) {
    const output = `${result.stdout ?? ''}${result.stderr ?? ''}`.trim();
    throw new Error(
      `${command} ${args.join(' ')} failed (${result.error?.message ?? `code ${result.status}`}): ${output}`,
    );
  }
}
