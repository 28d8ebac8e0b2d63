import { DynamicModule, Module } from '@nestjs/common';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import type { DedupQueueDashboardOptions } from '../interfaces/dashboard-options.interface';
import {
  DEDUP_QUEUE_DASHBOARD_OPTIONS,
  DEFAULT_DASHBOARD_PATH,
  DEFAULT_DASHBOARD_REFRESH_MS,
} from './dashboard.constants';
import { createDashboardController } from './dashboard.controller';
import { DashboardAccessWarning } from './dashboard-access.warning';
import { DashboardExceptionFilter } from './dashboard-exception.filter';
import { buildDashboardPage } from './dashboard-page';
import { DashboardSchedulesService } from './dashboard-schedules.service';
import { DashboardService } from './dashboard.service';

/**
 * A web page and a JSON admin API for the queues of `DedupQueueModule` (imported next to it, in the same app):
 * every queue with its counts, any workflow found by its ID or deduplication ID, and actions on them.
 *
 * ```ts
 * imports: [
 *   DedupQueueModule.forRoot({ ... }),
 *   DedupQueueDashboardModule.forRoot({ path: '/queues', guards: [AdminGuard] }),
 * ]
 * ```
 *
 * Without `guards`, the dashboard is open to anyone who can reach the application (a warning says so at boot).
 */
@Module({})
export class DedupQueueDashboardModule {
  /**
   * Mounts the dashboard at `path` (default `'/queues'`, its API under `path + '/api'`), behind `guards`.
   * NOTE: no forRootAsync: a route's path is fixed when the controller is declared, before any provider exists.
   */
  static forRoot(options: DedupQueueDashboardOptions = {}): DynamicModule {
    const path = validPath(options.path ?? DEFAULT_DASHBOARD_PATH);
    const guards = options.guards ?? [];
    if (!Array.isArray(guards) || guards.some((guard) => typeof guard !== 'function')) {
      throw new DedupQueueConfigurationError('DedupQueueDashboardModule: `guards` must be an array of guard classes');
    }
    const refreshIntervalMs = options.refreshIntervalMs ?? DEFAULT_DASHBOARD_REFRESH_MS;
    if (!Number.isInteger(refreshIntervalMs) || refreshIntervalMs < 250) {
      throw new DedupQueueConfigurationError(
        'DedupQueueDashboardModule: `refreshIntervalMs` must be an integer of at least 250',
      );
    }
    const page = buildDashboardPage({ refreshIntervalMs, showErrorStacks: options.showErrorStacks === true });
    return {
      module: DedupQueueDashboardModule,
      imports: options.imports ?? [],
      controllers: [createDashboardController(path, guards, page, validOrigins(options.allowedOrigins ?? []))],
      providers: [
        { provide: DEDUP_QUEUE_DASHBOARD_OPTIONS, useValue: options },
        DashboardService,
        DashboardSchedulesService,
        DashboardExceptionFilter,
        { provide: DashboardAccessWarning, useFactory: () => new DashboardAccessWarning(path, guards.length) },
      ],
    };
  }
}

function validPath(path: string): string {
  if (typeof path !== 'string' || !/^\/?[A-Za-z0-9._~\-/]*$/.test(path) || path.includes('//')) {
    throw new DedupQueueConfigurationError(
      `DedupQueueDashboardModule: \`path\` ${JSON.stringify(path)} must be a plain URL path such as '/queues' ` +
        '(letters, digits, - _ . ~ /)',
    );
  }
  return path.replace(/\/+$/, '') || '/';
}

/** The origins (`scheme://host[:port]`) whose pages may act, as browsers send them in `Origin`. */
function validOrigins(origins: unknown): ReadonlySet<string> {
  if (!Array.isArray(origins)) {
    throw new DedupQueueConfigurationError(
      "DedupQueueDashboardModule: `allowedOrigins` must be an array of origins such as 'https://admin.example.com'",
    );
  }
  return new Set(
    origins.map((origin: unknown) => {
      const url = typeof origin === 'string' ? parsedOrigin(origin) : undefined;
      if (!url) {
        throw new DedupQueueConfigurationError(
          `DedupQueueDashboardModule: \`allowedOrigins\` holds ${JSON.stringify(origin)}; give an origin, ` +
            "scheme://host[:port] without a path, such as 'https://admin.example.com'",
        );
      }
      return url;
    }),
  );
}

function parsedOrigin(text: string): string | undefined {
  try {
    const url = new URL(text);
    const origin = url.origin;
    return origin !== 'null' && text.replace(/\/$/, '').toLowerCase() === origin.toLowerCase()
      ? origin.toLowerCase()
      : undefined;
  } catch {
    return undefined;
  }
}
