import type { EntityManager } from 'typeorm';
import type { TransactionSql } from '../interfaces/transaction-sql.interface';
import { fromEntityManager } from '../transactions/from-entity-manager';

/**
 * The transaction in which a recorded operation of a workflow body (`send`, a child enqueue) writes, and its record
 * with it (see `WorkflowExecution.runRecorded`): a `TransactionSql` to write through, its `manager`, and what must
 * happen in this process once it commits (never if it rolls back), such as telling a superseded holder's run.
 */
export interface RecordedTransaction extends TransactionSql {
  readonly manager: EntityManager;
  afterCommit(effect: () => void): void;
}

/** A recorded operation's transaction over `manager`, its after-commit effects kept in `effects`. */
export function recordedTransaction(manager: EntityManager, effects: Array<() => void>): RecordedTransaction {
  return {
    ...fromEntityManager(manager, 'manager'),
    manager,
    afterCommit: (effect) => effects.push(effect),
  };
}

/** The after-commit hook of a transaction when it is a recorded operation's; undefined for a caller's own. */
export function afterCommitOf(transaction: TransactionSql | undefined): ((effect: () => void) => void) | undefined {
  const hook = (transaction as Partial<RecordedTransaction> | undefined)?.afterCommit;
  return typeof hook === 'function' ? hook : undefined;
}
