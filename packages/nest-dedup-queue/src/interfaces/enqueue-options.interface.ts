import type { EntityManager } from 'typeorm';
import type { TransactionSql } from './transaction-sql.interface';

/**
 * What to do when the deduplication ID is held:
 * - `'reject'`: throw `QueueDeduplicatedError` (the default);
 * - `'return-existing'`: return the holder's handle (`created: false`);
 * - `'replace'`: if the holder has not started, replace its arguments (and delay, if given) with this call's and
 *   return its handle (debounce, latest wins); if it is running, do what `whenRunning` says.
 * - `'supersede'`: the holder, queued or running (and a `queue-next` follow-up waiting for it), ends `CANCELLED` and
 *   this call's workflow takes the key in the same transaction; a running holder's signal aborts wherever it runs;
 *   both rows name each other (`supersededBy` / `supersedes` in their status). A finished holder still within its
 *   deduplication window is not superseded: `QueueDeduplicatedError`.
 * - `'send'`: the holder, queued, running or waiting, gets this call's arguments array as a message on
 *   `DUPLICATE_TOPIC` (it receives them with `recv(DUPLICATE_TOPIC)`) and its handle is returned (`created: false`);
 *   a free key starts a workflow with them. A message the holder has not received when it ends starts the next
 *   workflow of the key (the holder's workflow and options, the message's arguments), and the messages after it go
 *   to that one: no call is lost and there is never a second holder. A finished holder still within its
 *   deduplication window cannot receive: `QueueDeduplicatedError`.
 */
export type DuplicatePolicy = 'reject' | 'return-existing' | 'replace' | 'supersede' | 'send';

/**
 * With `onDuplicate: 'replace'`, when the holder is already running: `'reject'` (the default), `'return-existing'`,
 * or `'queue-next'`: keep exactly one follow-up with the latest arguments, which takes the key and runs when the
 * holder ends ("one running + one waiting").
 */
export type WhenRunningPolicy = 'reject' | 'return-existing' | 'queue-next';

/** Options of one `QueueService.enqueue()` call. */
export interface EnqueueOptions {
  /**
   * While a workflow with this ID is `ENQUEUED` or `PENDING` in the queue, another enqueue with the same ID into
   * the same queue throws `QueueDeduplicatedError` and writes nothing. 1 to 255 characters (Unicode code points:
   * `'😀'` is one).
   */
  deduplicationId?: string;
  /**
   * The workflow's ID (default: a random UUID). Enqueueing the same ID twice is idempotent: the second call returns
   * a handle to the first workflow, whose body runs once. 1 to 255 characters (Unicode code points: `'😀'` is
   * one).
   */
  workflowId?: string;
  /**
   * Start-to-close timeout in milliseconds: once started, a workflow still running after this long is cancelled
   * (status CANCELLED, deduplication ID freed), even if its process died; its body sees `workflowContext().signal`
   * abort and no further step starts. A workflow enqueued by a running workflow (a child) without this option
   * inherits its parent's deadline (cancelled when the parent's timeout passes, whether or not it started); with it,
   * it has its own; `null`: no deadline at all (a child detached from its parent's).
   */
  timeoutMs?: number | null;
  /**
   * Workflows with the same partition key share the queue's `partitionConcurrency` (and a per-partition rate limit),
   * and partitions are served round-robin, so a busy key never starves the others. 1 to 255 characters (Unicode
   * code points: `'😀'` is one).
   */
  partitionKey?: string;
  /** Lower runs first; FIFO within a priority. An integer, default 0. */
  priority?: number;
  /**
   * Start no earlier than this many milliseconds from now (by the database's clock). The workflow is `DELAYED`
   * meanwhile, and holds its deduplication ID.
   */
  delayMs?: number;
  /**
   * With `onDuplicate: 'replace'` and `delayMs` (a debounce): replacing never moves the start later than this many
   * milliseconds after the key was taken (by the database's clock), so a steady stream of calls cannot starve the
   * run. A `queue-next` follow-up counts from when it was queued. At least `delayMs`.
   */
  maxDelayMs?: number;
  /** Start no earlier than this time (instead of `delayMs`). */
  runAt?: Date;
  /**
   * What to do when the deduplication ID is held. Default `'reject'`. `'return-existing'` and `'replace'` need a
   * `deduplicationId` (`InvalidArgumentError` otherwise).
   */
  onDuplicate?: DuplicatePolicy;
  /** With `onDuplicate: 'replace'`, what to do when the holder is already running. Default `'reject'`. */
  whenRunning?: WhenRunningPolicy;
  /**
   * Keep the deduplication ID held for this long after the workflow ended (webhook replays, "at most once per user
   * per hour"). Expired windows are cleared when the key is next wanted, at no other cost.
   */
  deduplicationWindowMs?: number;
  /**
   * Refuse a duplicate whose arguments differ from the holder's (compared as stored JSON, in the statement that finds
   * the holder) with `DeduplicationMismatchError` (HTTP 422 through `DedupExceptionFilter`), whatever `onDuplicate`
   * says; a duplicate with the same arguments gets what the policy gives. Nothing is written for a mismatch.
   * Default false.
   */
  requireSameArgs?: boolean;
  /** With `deduplicationWindowMs`: free the key as soon as the workflow ends with ERROR. Default false. */
  releaseKeyOnError?: boolean;
  /**
   * The version of the workflow the run records (`@Workflow({ version })`): only a process that registers this name
   * at this version runs it. Default: the highest version of the workflow registered in this process; in a process
   * that does not have the workflow (`externalWorkflows`), the highest any live executor registers (else the highest
   * any process ever registered, else 1). A positive integer. See docs/changing-workflows.md.
   */
  version?: number;
  /**
   * Enqueue inside this TypeORM transaction (the `manager` of `dataSource.transaction(manager => ...)`): the
   * workflow exists only if the caller commits, and workers see it only after commit. A duplicate raises
   * `QueueDeduplicatedError` without aborting the caller's transaction (the insert runs under a savepoint).
   * Not with `db`.
   */
  manager?: EntityManager;
  /**
   * Enqueue inside the caller's transaction of any driver: `fromPg(client)`, `fromKnex(trx)`, `fromKysely(trx)`,
   * `fromDrizzle(tx)`, `fromPrisma(tx)`, or any `TransactionSql`. The same guarantees as `manager`: the workflow
   * exists only if the caller commits, workers are woken by the commit, and a duplicate raises
   * `QueueDeduplicatedError` without aborting the caller's transaction. Not with `manager`.
   */
  db?: TransactionSql;
}
