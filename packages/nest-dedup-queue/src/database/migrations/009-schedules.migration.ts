import type { Migration } from './migration.interface';

/**
 * Schedules (`@Scheduled` and `ScheduleService.create`): one row per schedule with its definition, its pause flag
 * and its catch-up cursor `ticked_through` (every tick up to this instant has been enqueued or deliberately
 * skipped), which the tick transaction locks, reads and advances together with the enqueue of the tick's workflow.
 */
export const schedules: Migration = {
  version: 9,
  name: 'schedules',
  up: (schema) => `
    CREATE TABLE ${schema}.schedules (
      name             text PRIMARY KEY,
      source           text NOT NULL CHECK (source IN ('decorator', 'runtime')),
      cron             text NOT NULL,
      timezone         text,
      workflow_name    text NOT NULL,
      queue_name       text NOT NULL,
      args             json NOT NULL DEFAULT '[]',
      catch_up         text NOT NULL CHECK (catch_up IN ('none', 'latest', 'all')),
      catch_up_limit   integer NOT NULL,
      overlap          boolean NOT NULL DEFAULT true,
      paused           boolean NOT NULL DEFAULT false,
      ticked_through   timestamptz NOT NULL DEFAULT now(),
      last_run_at      timestamptz,
      last_workflow_id text,
      created_at       timestamptz NOT NULL DEFAULT now(),
      updated_at       timestamptz NOT NULL DEFAULT now()
    );
  `,
};
