/** The Postgres error fields the module looks at (pg's DatabaseError, or TypeORM's QueryFailedError copying them). */
interface PostgresErrorFields {
  code?: string;
  constraint?: string;
}

const UNIQUE_VIOLATION = '23505';

/** Whether `error` is a unique violation (SQLSTATE 23505) on the named index or constraint. */
export function isUniqueViolationOn(error: unknown, constraint: string): boolean {
  const fields = error as PostgresErrorFields | null;
  return fields?.code === UNIQUE_VIOLATION && fields.constraint === constraint;
}
