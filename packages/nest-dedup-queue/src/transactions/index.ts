export { fromPg, PgTransactionClient } from './from-pg';
export { fromKnex, KnexTransaction } from './from-knex';
export { fromKysely, KyselyTransaction } from './from-kysely';
export { fromDrizzle, DrizzleTransaction } from './from-drizzle';
export { fromPrisma, PrismaTransaction } from './from-prisma';
