import { CanActivate, ExecutionContext, Injectable, UnauthorizedException } from '@nestjs/common';
import { timingSafeEqual } from 'node:crypto';
import { demoConfig } from './demo.config';

/**
 * The demo's guard in front of the dashboard at /queues. Permissive by default, so that the demo works out of the
 * box: with `DEMO_DASHBOARD_PASSWORD` set, it asks for HTTP Basic credentials (any user name, that password), which
 * the browser then sends with the page's API calls too. A real app puts its own auth guard here.
 */
@Injectable()
export class DashboardAccessGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const password = demoConfig().dashboardPassword;
    if (password === undefined) return true;
    const http = context.switchToHttp();
    const header: string = http.getRequest<{ headers: { authorization?: string } }>().headers.authorization ?? '';
    const given = Buffer.from(
      Buffer.from(header.replace(/^Basic /, ''), 'base64')
        .toString('utf8')
        .replace(/^[^:]*:/, ''),
    );
    const expected = Buffer.from(password);
    if (header.startsWith('Basic ') && given.length === expected.length && timingSafeEqual(given, expected))
      return true;
    const response = http.getResponse<{ setHeader(name: string, value: string): void }>();
    response.setHeader('WWW-Authenticate', 'Basic realm="queues"');
    throw new UnauthorizedException('The dashboard needs the demo password (DEMO_DASHBOARD_PASSWORD)');
  }
}
