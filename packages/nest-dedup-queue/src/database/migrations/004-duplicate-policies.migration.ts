import type { Migration } from './migration.interface';

export const duplicatePolicies: Migration = {
  version: 4,
  name: 'duplicate-policies',
  up: (schema) => `
    ALTER TABLE ${schema}.workflows
      ADD COLUMN dedup_window_ms        integer,
      ADD COLUMN release_key_on_error   boolean NOT NULL DEFAULT false,
      ADD COLUMN dedup_expires_at       timestamptz,
      ADD COLUMN next_deduplication_id  text;

    ALTER TABLE ${schema}.workflows DROP CONSTRAINT workflows_check;
    ALTER TABLE ${schema}.workflows ADD CONSTRAINT workflows_active_key_check
      CHECK (active_deduplication_id IS NULL OR status IN ('ENQUEUED', 'PENDING') OR dedup_expires_at IS NOT NULL);

    CREATE UNIQUE INDEX workflows_next_deduplication_id
      ON ${schema}.workflows (queue_name, next_deduplication_id)
      WHERE next_deduplication_id IS NOT NULL;

    CREATE FUNCTION ${schema}.promote_follow_up() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE ${schema}.workflows
      SET active_deduplication_id = next_deduplication_id, next_deduplication_id = NULL, not_before = NULL,
          updated_at = now()
      WHERE queue_name = NEW.queue_name AND next_deduplication_id = OLD.active_deduplication_id
        AND status = 'ENQUEUED';
      IF FOUND THEN
        PERFORM pg_notify('dedup_queue:' || TG_TABLE_SCHEMA, NEW.queue_name);
      END IF;
      RETURN NULL;
    END $$;

    CREATE TRIGGER workflows_promote_follow_up
      AFTER UPDATE OF active_deduplication_id ON ${schema}.workflows
      FOR EACH ROW
      WHEN (OLD.active_deduplication_id IS NOT NULL AND NEW.active_deduplication_id IS NULL)
      EXECUTE FUNCTION ${schema}.promote_follow_up();
  `,
};
