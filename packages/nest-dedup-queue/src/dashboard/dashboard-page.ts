import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The dashboard's page: one HTML document with its stylesheet and script inlined, and the policy that allows them. */
export interface DashboardPage {
  html: string;
  /** `Content-Security-Policy`: nothing but the inlined script and style (by hash) and the page's own API. */
  contentSecurityPolicy: string;
}

/** Builds the page from the static files shipped in the package (`dist/dashboard/static`); nothing is fetched. */
export function buildDashboardPage(settings: { refreshIntervalMs: number; showErrorStacks: boolean }): DashboardPage {
  const directory = join(__dirname, 'static');
  const read = (file: string) => readFileSync(join(directory, file), 'utf8');
  const style = read('dashboard.css');
  const script = read('dashboard.js');
  const html = read('index.html')
    .replace('/*STYLE*/', () => style)
    .replace('/*SCRIPT*/', () => script)
    .replace('/*SETTINGS*/', () => JSON.stringify(settings).replace(/</g, '\\u003c'));
  const hash = (text: string) => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;
  return {
    html,
    contentSecurityPolicy: [
      "default-src 'none'",
      `script-src ${hash(script)}`,
      `style-src ${hash(style)}`,
      "connect-src 'self'",
      "img-src 'self' data:",
      "base-uri 'none'",
      "form-action 'none'",
      "frame-ancestors 'none'",
    ].join('; '),
  };
}
