import { InvalidArgumentError } from '../errors/invalid-argument.error';
import type { TransactionSql } from '../interfaces/transaction-sql.interface';

/** What `fromPrisma` needs of a Prisma interactive transaction client. */
export interface PrismaTransaction {
  $queryRawUnsafe(query: string, ...values: unknown[]): PromiseLike<unknown>;
  /** Only the `PrismaClient` has it, not the client of a transaction. */
  readonly $connect?: unknown;
}

/** The Postgres error behind a Prisma driver adapter's `P2010` (raw query failed), as `@prisma/adapter-pg` reports it. */
interface DriverAdapterFailure {
  originalCode?: string;
  originalMessage?: string;
  constraint?: { index?: string };
}

/**
 * The `db` of an enqueue inside a Prisma interactive transaction (Prisma 7 with the `@prisma/adapter-pg` driver
 * adapter): the statements go through `tx.$queryRawUnsafe`.
 *
 * ```ts
 * await prisma.$transaction(async (tx) => {
 *   await tx.order.create({ data: order });
 *   await queues.enqueue('fulfil', this.tasks.fulfil, [order.id], { deduplicationId: order.id, db: fromPrisma(tx) });
 * });
 * ```
 * @throws InvalidArgumentError when `tx` is the `PrismaClient` itself rather than the client of `$transaction`
 */
export function fromPrisma(tx: PrismaTransaction): TransactionSql {
  if (typeof tx?.$queryRawUnsafe !== 'function' || typeof tx.$connect === 'function') {
    throw new InvalidArgumentError(
      'fromPrisma(tx)',
      'must be the client of an interactive transaction (prisma.$transaction(async (tx) => ...)), not the PrismaClient',
    );
  }
  return {
    executeSql: async (text, values) => {
      try {
        return { rows: (await tx.$queryRawUnsafe(text, ...values)) as unknown[] };
      } catch (error) {
        throw postgresErrorOf(error);
      }
    },
  };
}

/** Prisma's error with Postgres's fields (`code`, `constraint`, `severity`) where the driver adapter gave them. */
function postgresErrorOf(error: unknown): unknown {
  const meta = (error as { meta?: { driverAdapterError?: { cause?: DriverAdapterFailure } } } | null)?.meta;
  const failure = meta?.driverAdapterError?.cause;
  if (typeof failure?.originalCode !== 'string') return error;
  return Object.assign(new Error(failure.originalMessage ?? (error as Error).message, { cause: error }), {
    code: failure.originalCode,
    constraint: failure.constraint?.index,
    severity: 'ERROR',
  });
}
