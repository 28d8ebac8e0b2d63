/** The demo's settings, from the environment. */
export interface DemoConfig {
  databaseUrl: string;
  schema: string;
  /** How long one `UserTasks.process` run takes, so a person can see the 409 by posting twice. */
  taskDurationMs: number;
  /** When set, the dashboard at /queues asks for it (HTTP Basic); unset, the dashboard is open. */
  dashboardPassword: string | undefined;
  /** How long the fake language model of `/answers` takes per token. */
  tokenDelayMs: number;
}

export function demoConfig(): DemoConfig {
  const databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) throw new Error('DATABASE_URL is not set (main.ts sets it to a throwaway server when unset)');
  return {
    databaseUrl,
    schema: process.env.DEDUP_QUEUE_SCHEMA ?? 'dedup_queue',
    taskDurationMs: Number(process.env.DEMO_TASK_MS ?? 5000),
    dashboardPassword: process.env.DEMO_DASHBOARD_PASSWORD || undefined,
    tokenDelayMs: Number(process.env.DEMO_TOKEN_MS ?? 120),
  };
}
