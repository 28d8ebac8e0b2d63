import { ForbiddenException, UnsupportedMediaTypeException } from '@nestjs/common';

/** The request headers an action is judged by (names in lower case, as Express and Fastify give them). */
export type ActionHeaders = Record<string, string | string[] | undefined>;

/**
 * Lets an action (any request that changes something) through only from the dashboard's own page, from an origin
 * listed in `allowedOrigins`, or from a client that is not a browser; a page of another site cannot make a logged-in
 * operator's browser act, whatever CORS the application grants (`enableCors({ origin: true, credentials: true })`
 * lets such a page send the request and read the answer):
 *
 * - the body must be `application/json`, which a cross-site form cannot send without a CORS preflight;
 * - a browser says where the request comes from: `Sec-Fetch-Site` (which a page cannot set) must be `same-origin`,
 *   or, from a browser that sends only `Origin`, that origin's host must be the request's `Host`;
 * - a request with neither header (curl, a script, a server) is not a browser's and goes through, behind the
 *   dashboard's guards as any other.
 */
export function assertDashboardAction(headers: ActionHeaders, allowedOrigins: ReadonlySet<string>): void {
  const contentType = header(headers, 'content-type');
  if (!contentType?.toLowerCase().startsWith('application/json')) {
    throw new UnsupportedMediaTypeException(
      'dashboard actions take Content-Type: application/json (a JSON body, {} when empty)',
    );
  }
  const origin = header(headers, 'origin');
  if (origin !== undefined && allowedOrigins.has(origin.toLowerCase())) return;
  const site = header(headers, 'sec-fetch-site');
  if (site !== undefined ? site === 'same-origin' : origin === undefined || sameHost(origin, header(headers, 'host'))) {
    return;
  }
  throw new ForbiddenException(
    `dashboard actions are refused from a page of another origin (${origin ?? `Sec-Fetch-Site: ${site}`}); ` +
      'an origin of your own is listed in DedupQueueDashboardModule.forRoot({ allowedOrigins })',
  );
}

function sameHost(origin: string, host: string | undefined): boolean {
  try {
    return host !== undefined && new URL(origin).host === host.toLowerCase();
  } catch {
    return false;
  }
}

function header(headers: ActionHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}
