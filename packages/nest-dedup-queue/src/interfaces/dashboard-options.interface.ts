import type { CanActivate, ModuleMetadata, Type } from '@nestjs/common';

/** Options of `DedupQueueDashboardModule.forRoot()`. */
export interface DedupQueueDashboardOptions {
  /**
   * Where the page is served; its JSON API is under `path + '/api'`. Relative to the application's global prefix,
   * like a controller's path. Default `'/queues'`.
   */
  path?: string;
  /**
   * The application's guards (classes), run before every route of the dashboard, the page and the API alike, in
   * order. They are resolved through dependency injection in the dashboard's module: give `imports` for the modules
   * that provide their dependencies (global modules need nothing). Without a guard the dashboard is open to anyone
   * who can reach the application.
   */
  guards?: Type<CanActivate>[];
  /** Modules whose providers the guards inject (an auth module, a config module). */
  imports?: ModuleMetadata['imports'];
  /** Show the stack of recorded errors (a workflow's, a step's) in the API and the page. Default false: hidden. */
  showErrorStacks?: boolean;
  /** How often the page refreshes what it shows, in milliseconds. Default 3000. */
  refreshIntervalMs?: number;
  /**
   * Origins (`'https://admin.example.com'`: scheme, host and port) whose pages may call the dashboard's actions from
   * a browser, besides the dashboard's own page. Every action (pause, cancel, rerun, ...) is refused with 403 from a
   * browser page of any other origin, whatever CORS the application grants; clients that are not browsers (curl, a
   * script) send no origin and are let through, behind `guards`. Default: none.
   */
  allowedOrigins?: string[];
}
