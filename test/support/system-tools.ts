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
} as const;

export type SystemTool = keyof typeof SYSTEM_TOOLS;

/** Set by `.ci/run`: a suite whose tools (or the npm registry) are missing fails instead of skipping. */
const REQUIRED = process.env.REQUIRE_SYSTEM_TOOLS === '1';

/** The tools of `tools` that this machine lacks. */
export function missingTools(tools: readonly SystemTool[]): SystemTool[] {
  return tools.filter((tool) => !existsSync(SYSTEM_TOOLS[tool]));
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
    `${name}: needs ${missing.map((tool) => `${tool} (${SYSTEM_TOOLS[tool]})`).join(', ')}; ` +
      `install with: apt-get install -y ${missing.map(debianPackage).join(' ')}`,
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

function debianPackage(tool: SystemTool): string {
  return tool === 'postgres-15' ? 'postgresql-15' : tool;
}
