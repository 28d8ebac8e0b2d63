import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/** System programs some suites need beyond Node and npm; `.ci/run` installs them, a user's machine may not have them. */
export const SYSTEM_TOOLS = {
  /** PgBouncer (Debian package `pgbouncer`). */
  pgbouncer: '/usr/sbin/pgbouncer',
  /** Headless Chromium (Debian package `chromium`), driven by playwright-core. */
  chromium: '/usr/bin/chromium',
  /** PostgreSQL 15 server binaries with pg_ctl, pg_basebackup (Debian package `postgresql-15`), for standbys. */
  'postgres-15': '/usr/lib/postgresql/15/bin/pg_basebackup',
  /** The Citus extension for those binaries (a tarball in `../shared/citus/`, not a Debian package). */
  citus: '/usr/lib/postgresql/15/lib/citus.so',
} as const;

export type SystemTool = keyof typeof SYSTEM_TOOLS;

/** How a user installs each tool: a Debian package, or instructions for what is not one. */
const INSTALL: Record<SystemTool, { debianPackage: string } | { instructions: string }> = {
  pgbouncer: { debianPackage: 'pgbouncer' },
  chromium: { debianPackage: 'chromium' },
  'postgres-15': { debianPackage: 'postgresql-15' },
  citus: {
    instructions:
      'Citus is not a Debian package: as root, from the repository, ' +
      'tar -xzf ../shared/citus/citus-13.2.2-pg15-amd64.tar.gz -C / (see ../shared/citus/README.md)',
  },
};

/** Set by `.ci/run`: a suite whose tools (or the npm registry) are missing fails instead of skipping. */
const REQUIRED = process.env.REQUIRE_SYSTEM_TOOLS === '1';

/** `MISSING_SYSTEM_TOOLS=citus,chromium`: tools to treat as absent, to see a suite skip (or fail under CI) here. */
const TREATED_AS_MISSING = new Set((process.env.MISSING_SYSTEM_TOOLS ?? '').split(',').map((tool) => tool.trim()));

/** The tools of `tools` that this machine lacks (or that `MISSING_SYSTEM_TOOLS` names). */
export function missingTools(tools: readonly SystemTool[]): SystemTool[] {
  return tools.filter((tool) => TREATED_AS_MISSING.has(tool) || !existsSync(SYSTEM_TOOLS[tool]));
}

/**
 * `describe` for a suite that needs system tools. Where one is missing it says so and skips, except under
 * `REQUIRE_SYSTEM_TOOLS=1` (CI), where the suite fails with the same message.
 */
export function describeWithTools(tools: readonly SystemTool[], name: string, body: () => void): void {
  const missing = missingTools(tools);
  if (missing.length === 0) {
    describe(name, body);
    return;
  }
  describeUnavailable(
    name,
    `${name}: needs ${missing.map((tool) => `${tool} (${SYSTEM_TOOLS[tool]})`).join(', ')}; ${howToInstall(missing)}`,
    body,
  );
}

/**
 * `describe` for a suite that installs packages from the npm registry. When `npm ping` gets no answer within 10 s
 * it says so and skips, except under `REQUIRE_SYSTEM_TOOLS=1` (CI), where the suite fails with the same message.
 */
export function describeWithRegistry(name: string, body: () => void): void {
  const ping = spawnSync('npm', ['ping', '--fetch-retries=0', '--fetch-timeout=10000'], {
    encoding: 'utf8',
    timeout: 15_000,
  });
  if (ping.status === 0) {
    describe(name, body);
    return;
  }
  const answer = (ping.stderr || ping.stdout || ping.error?.message || 'no answer').trim().split('\n').pop();
  describeUnavailable(name, `${name}: needs the npm registry, which did not answer \`npm ping\` (${answer})`, body);
}

function describeUnavailable(name: string, message: string, body: () => void): void {
  if (REQUIRED) {
    describe(name, () => {
      it('has the system tools it needs', () => {
        throw new Error(message);
      });
    });
    return;
  }
  console.warn(`[skip] ${message}`);
  describe.skip(name, body);
}

function howToInstall(missing: readonly SystemTool[]): string {
  const packages: string[] = [];
  const instructions: string[] = [];
  for (const tool of missing) {
    const install = INSTALL[tool];
    if ('debianPackage' in install) packages.push(install.debianPackage);
    else instructions.push(install.instructions);
  }
  if (packages.length > 0) instructions.unshift(`install with: apt-get install -y ${packages.join(' ')}`);
  return instructions.join('; ');
}
