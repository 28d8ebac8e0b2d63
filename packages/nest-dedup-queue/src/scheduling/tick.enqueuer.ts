import { Injectable } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import type { EntityManager } from 'typeorm';
import { QueueDatabase } from '../database/connection/queue-database';
import { QueueDeduplicatedError } from '../errors/queue-deduplicated.error';
import type { EnqueuedWorkflowHandle } from '../interfaces/workflow-handle.interface';
import { QueueService } from '../queue.service';
import { fromStoredJson } from '../utils/stored-json';
import { ScheduleRow, ScheduleStore, tickWorkflowId } from './schedule.store';
import type { TickCalculator } from './tick.calculator';

/** What one evaluation of a schedule did. */
export interface TickOutcome {
  /** The schedule's row is gone (removed). */
  removed: boolean;
  paused: boolean;
  /** The ticks whose runs were enqueued (or found enqueued already), oldest first. */
  enqueued: Date[];
  /** How many of them were missed ticks run by the catch-up policy. */
  caughtUp: number;
  /** Ticks skipped because the previous run still held the schedule (`overlap: false`). */
  overlapped: number;
}

/**
 * Enqueues the runs of a schedule's due ticks. Each evaluation is one transaction that locks the schedule's row,
 * reads its catch-up cursor, enqueues the runs (deterministic workflow IDs, `runAt` = the tick's time, so the claim
 * gates the start by the database's clock) and moves the cursor, so that processes evaluating the same tick
 * one after the other find it taken, whatever their clocks say.
 */
@Injectable()
export class TickEnqueuer {
  constructor(
    private readonly database: QueueDatabase,
    private readonly queues: QueueService,
    private readonly store: ScheduleStore,
  ) {}

  /**
   * Enqueues the ticks of (cursor, `upTo`]: those after `regularFrom` (this process was running then) always, those
   * before it (no process may have been running) as the schedule's catch-up policy says.
   */
  async advance(name: string, ticks: TickCalculator, upTo: Date, regularFrom: Date): Promise<TickOutcome> {
    return this.inTransaction(async (manager, query) => {
      const outcome: TickOutcome = { removed: false, paused: false, enqueued: [], caughtUp: 0, overlapped: 0 };
      const row = await this.store.lock(query, name);
      if (!row) return { ...outcome, removed: true };
      if (row.paused) {
        await this.store.advance(query, name, upTo < row.db_now ? upTo : row.db_now);
        return { ...outcome, paused: true };
      }
      const cursor = row.ticked_through;
      const missedUpTo = upTo < regularFrom ? upTo : regularFrom;
      const missed = regularFrom > cursor ? this.missedToRun(row, ticks, cursor, missedUpTo) : [];
      const due = [...missed, ...ticks.ticksBetween(cursor > regularFrom ? cursor : regularFrom, upTo)];
      if (due.length === 0) return outcome;
      let lastRun: { at: Date; workflowId: string } | undefined;
      for (const tick of due) {
        const handle = await this.enqueueRun(manager, row, tickWorkflowId(name, tick), tick, tick);
        if (handle) {
          outcome.enqueued.push(tick);
          lastRun = { at: tick, workflowId: handle.workflowId };
        } else {
          outcome.overlapped += 1;
        }
      }
      outcome.caughtUp = missed.filter((tick) => outcome.enqueued.includes(tick)).length;
      await this.store.advance(query, name, due[due.length - 1], lastRun);
      return outcome;
    });
  }

  /**
   * Enqueues one run now, paused or not, without touching the catch-up cursor. Undefined when there is no such
   * schedule. @throws QueueDeduplicatedError with `overlap: false` while the previous run is still going
   */
  async trigger(name: string): Promise<EnqueuedWorkflowHandle<unknown> | undefined> {
    return this.inTransaction(async (manager, query) => {
      const row = await this.store.lock(query, name);
      if (!row) return undefined;
      const workflowId = `sched:${name}:trigger:${randomUUID()}`;
      const handle = await this.enqueueRun(manager, row, workflowId, row.db_now, undefined, true);
      await this.store.advance(query, name, row.ticked_through, { at: row.db_now, workflowId });
      return handle;
    });
  }

  private missedToRun(row: ScheduleRow, ticks: TickCalculator, cursor: Date, missedUpTo: Date): Date[] {
    switch (row.catch_up) {
      case 'latest':
        return ticks.latestTicks(cursor, missedUpTo, 1);
      case 'all':
        return ticks.latestTicks(cursor, missedUpTo, row.catch_up_limit);
      default:
        return [];
    }
  }

  /** Undefined when the tick is skipped because the previous run still holds the schedule (`overlap: false`). */
  private async enqueueRun(
    manager: EntityManager,
    row: ScheduleRow,
    workflowId: string,
    time: Date,
    runAt: Date | undefined,
    throwOnOverlap = false,
  ): Promise<EnqueuedWorkflowHandle<unknown> | undefined> {
    const args = row.source === 'decorator' ? [time] : fromStoredJson<unknown[]>(row.args);
    try {
      return await this.queues.enqueue(row.queue_name, row.workflow_name, args, {
        workflowId,
        runAt,
        deduplicationId: row.overlap ? undefined : `sched:${row.name}`,
        manager,
      });
    } catch (error) {
      if (error instanceof QueueDeduplicatedError && !throwOnOverlap) return undefined;
      throw error;
    }
  }

  /** A TypeORM transaction (the enqueue joins it through `manager`); driver errors come out as the module's. */
  private async inTransaction<T>(
    work: (manager: EntityManager, query: <R>(sql: string, params?: unknown[]) => Promise<R[]>) => Promise<T>,
  ): Promise<T> {
    return this.database.managerTransaction(async (manager) => {
      const runner = manager.queryRunner;
      if (!runner) throw new Error('the EntityManager has no query runner');
      // NOTE: structured results: TypeORM's plain query() answers an UPDATE with [rows, count] instead of rows.
      return work(manager, async <R>(sql: string, params?: unknown[]) => {
        return (await runner.query(sql, params, true)).records as R[];
      });
    });
  }
}
