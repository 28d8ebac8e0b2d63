import { WAKE_UP_CHANNEL_PREFIX } from '../connection/notification-channels';
import { STATUS_SQL } from '../tables/workflow-status.sql';
import type { Migration } from './migration.interface';

/**
 * Re-creates the follow-up hand-over function of 004 from the definitions it shares with the code (the wake-up
 * channel's prefix, the status names: `promoteFollowUpFunctionSql`), so that they are written once. What it does is
 * unchanged.
 *
 * Backward compatible with the previous minor: `CREATE OR REPLACE` keeps the function's name, signature and trigger,
 * and its behaviour is the same, so a process of the previous version already running against a schema migrated to
 * 011 goes on working (its statements never name anything 011 adds or changes). NOTE: 011 installs the definition of
 * the package version that runs it; a change to the hand-over or to the channel's prefix must come with a new
 * migration that runs `promoteFollowUpFunctionSql` again, so that schemas already past 011 get it too.
 */
export const followUpHandOver: Migration = {
  version: 11,
  name: 'follow-up-hand-over',
  up: (schema) => promoteFollowUpFunctionSql(schema),
};

/**
 * The follow-up hand-over: the trigger function (created by migration 004, made from this definition since 011) that
 * runs after a row's `active_deduplication_id` goes from a key to NULL. In the same statement, the `queue-next`
 * follow-up waiting for that key (ENQUEUED, not due, holding the key's "next" slot) takes the key, becomes due at
 * once, and its queue's workers are woken on the wake-up channel.
 */
function promoteFollowUpFunctionSql(schemaSql: string): string {
  return `
    CREATE OR REPLACE FUNCTION ${schemaSql}.promote_follow_up() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE ${schemaSql}.workflows
      SET active_deduplication_id = next_deduplication_id, next_deduplication_id = NULL, not_before = NULL,
          updated_at = now()
      WHERE queue_name = NEW.queue_name AND next_deduplication_id = OLD.active_deduplication_id
        AND status = ${STATUS_SQL.ENQUEUED};
      IF FOUND THEN
        PERFORM pg_notify('${WAKE_UP_CHANNEL_PREFIX}' || TG_TABLE_SCHEMA, NEW.queue_name);
      END IF;
      RETURN NULL;
    END $$;
  `;
}
