/** Injection token of the `DedupQueueDashboardOptions` given to `DedupQueueDashboardModule.forRoot()`. */
export const DEDUP_QUEUE_DASHBOARD_OPTIONS = 'DEDUP_QUEUE_DASHBOARD_OPTIONS';

export const DEFAULT_DASHBOARD_PATH = '/queues';
export const DEFAULT_DASHBOARD_REFRESH_MS = 3000;
