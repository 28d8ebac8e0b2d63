import { promoteFollowUpFunctionSql } from '../workflow-finish.sql';
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
