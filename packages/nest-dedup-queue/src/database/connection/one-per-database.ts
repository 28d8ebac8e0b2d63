import type { QueueDatabase } from './queue-database';

/**
 * A getter of one `T` per module database, made on first use: what a workflow's code reaches through its execution
 * (which knows the database, not the module's providers) shares it with the module's services, in this process.
 */
export function onePerDatabase<T>(create: (database: QueueDatabase) => T): (database: QueueDatabase) => T {
  const made = new WeakMap<QueueDatabase, T>();
  return (database) => {
    let one = made.get(database);
    if (one === undefined) {
      one = create(database);
      made.set(database, one);
    }
    return one;
  };
}
