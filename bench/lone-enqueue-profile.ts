/*
 * node -r ./test/support/swc-register.js bench/lone-enqueue-profile.ts: where a lone enqueue call's time goes, next
 * to raw SQL's single-row insert (W3's `callP50`). A throwaway PostgreSQL of its own (Debian binaries, fsync and
 * synchronous_commit on, pg_stat_statements with planning tracked); the module on a schema of its own with no
 * worker, and raw SQL's W3 producer (bench/systems/raw-sql.js: `INSERT … ON CONFLICT DO NOTHING` with its
 * `pg_notify`) on its own `jobs` table. LEP_BLOCKS blocks (default 6) of LEP_CALLS
 * (default 500) calls each, one call at a time with LEP_GAP_MS (default 5, W3's 200/s) between calls, the two
 * systems alternating block by block (LEP_SYSTEMS, e.g. `raw SQL`, runs only the ones named: for a CPU profile of one,
 * `node --cpu-prof …`). Prints for each: the call's p50 and p90 (client wall clock), the client's CPU per call
 * (`process.cpuUsage`, the whole process, idle wake-ups included), the server's CPU per call (/proc), the insert
 * statement's planning (per plan) and execution (per call) from pg_stat_statements, and how often the module's
 * prepared insert ran on its generic plan. With LEP_SPLIT=1, also where each call's time goes: before `pg`'s
 * `Client.query`, from it to its result, and after (p50s in µs). Needs the Debian postgresql-15 package.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from 'pg';
import { QueueDatabase } from 'nest-dedup-queue/testing';
import { startPostgresServer } from '../test/support/postgres-server';
import { procCpuMeter } from './citus/server-processes';
import { bootModule, median } from './citus/workload';

const count = (name: string, fallback: number) => Number(process.env[name] || fallback);
const BLOCKS = count('LEP_BLOCKS', 6);
const CALLS = count('LEP_CALLS', 500);
const GAP_MS = count('LEP_GAP_MS', 5);

/** What this uses of bench/systems/raw-sql.js: its tables, and its W3 producer (the insert with its `pg_notify`). */
interface RawSqlSystem {
  install(ctx: { databaseUrl: string }): Promise<void>;
  producer(
    ctx: { databaseUrl: string; queueName: string },
    options: { mode: 'latency' },
  ): Promise<{ enqueue(key: string, payload: string): Promise<boolean>; close(): Promise<void> }>;
}

// eslint-disable-next-line @typescript-eslint/no-require-imports -- a CommonJS system of the bench, without types
const rawSql = require('./systems/raw-sql.js') as RawSqlSystem;

interface Sampled {
  walls: number[];
  splits: [number, number, number][];
  clientCpuUs: number;
  serverCpuS: number;
  calls: number;
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The instants of one call: when `pg`'s `Client.query` was first called, and when its result came back. */
interface CallInstants {
  sent?: bigint;
  answered?: bigint;
}

let currentCall: CallInstants | undefined;

/**
 * Wraps `Client.query` (promise and callback forms) of each copy of `pg` (the library's, and the bench's own, which raw
 * SQL uses) to note the instants of the call in progress.
 */
function timeClientQueries(): void {
  const copies = new Set(
    [require.resolve('pg'), require.resolve('pg', { paths: [require.resolve('nest-dedup-queue')] })].map(
      // eslint-disable-next-line @typescript-eslint/no-require-imports -- each copy of pg, found at run time
      (path) => (require(path) as { Client: typeof Client }).Client,
    ),
  );
  copies.forEach(timeQueriesOf);
}

function timeQueriesOf(clientClass: typeof Client): void {
  const original = clientClass.prototype.query as (...args: unknown[]) => unknown;
  const answered = (call: CallInstants | undefined) => {
    if (call && call.answered === undefined) call.answered = process.hrtime.bigint();
  };
  (clientClass.prototype as { query: unknown }).query = function (this: Client, ...args: unknown[]) {
    const call = currentCall;
    if (call && call.sent === undefined) call.sent = process.hrtime.bigint();
    const callback = args[args.length - 1];
    if (typeof callback === 'function') {
      args[args.length - 1] = (...result: unknown[]) => {
        answered(call);
        return (callback as (...result: unknown[]) => unknown)(...result);
      };
      return original.apply(this, args);
    }
    const result = original.apply(this, args);
    return result instanceof Promise
      ? result.then((value: unknown) => {
          answered(call);
          return value;
        })
      : result;
  };
}

async function main(): Promise<void> {
  const server = await startPostgresServer({
    binaries: 'debian',
    settings: {
      fsync: 'on',
      full_page_writes: 'on',
      shared_preload_libraries: "'pg_stat_statements'",
      'pg_stat_statements.track_planning': 'on',
    },
  });
  const module = await bootModule({ url: server.url, distribution: 'single' }, 'lone', false, [{ name: 'lone' }]);
  const rawContext = { databaseUrl: server.url, queueName: 'lone' };
  await rawSql.install(rawContext);
  const raw = await rawSql.producer(rawContext, { mode: 'latency' });
  try {
    await server.query('CREATE EXTENSION pg_stat_statements');
    const meter = procCpuMeter([server.dataDir]);
    const systems: Record<string, { call: (key: string) => Promise<unknown>; sampled: Sampled }> = {
      'nest-dedup-queue': {
        call: (key) => module.queues.enqueue('lone', module.tasks.run, [], { deduplicationId: key }),
        sampled: { walls: [], splits: [], clientCpuUs: 0, serverCpuS: 0, calls: 0 },
      },
      'raw SQL': {
        call: (key) => raw.enqueue(key, JSON.stringify({ key })),
        sampled: { walls: [], splits: [], clientCpuUs: 0, serverCpuS: 0, calls: 0 },
      },
    };
    if (process.env.LEP_SPLIT === '1') timeClientQueries();
    const only = process.env.LEP_SYSTEMS?.split(',');
    for (const name of Object.keys(systems)) if (only && !only.includes(name)) delete systems[name];
    for (const { call } of Object.values(systems)) for (let i = 0; i < 200; i++) await call(randomUUID());
    await server.query('SELECT pg_stat_statements_reset()');
    for (let block = 0; block < BLOCKS; block++) {
      for (const { call, sampled } of Object.values(systems)) {
        const stopServer = meter();
        const cpu = process.cpuUsage();
        for (let i = 0; i < CALLS; i++) {
          const instants: CallInstants = {};
          currentCall = instants;
          const started = process.hrtime.bigint();
          await call(randomUUID());
          const ended = process.hrtime.bigint();
          currentCall = undefined;
          sampled.walls.push(Number(ended - started) / 1e6);
          if (instants.sent !== undefined && instants.answered !== undefined) {
            const { sent, answered } = instants;
            sampled.splits.push([
              Number(sent - started) / 1e3,
              Number(answered - sent) / 1e3,
              Number(ended - answered) / 1e3,
            ]);
          }
          await pause(GAP_MS);
        }
        const used = process.cpuUsage(cpu);
        sampled.clientCpuUs += used.user + used.system;
        sampled.serverCpuS += stopServer()[0];
        sampled.calls += CALLS;
      }
    }
    const prepared = only?.includes('raw SQL')
      ? []
      : await module.app
          .get(QueueDatabase)
          .query<{ generic_plans: string; custom_plans: string }>(
            'SELECT generic_plans::text, custom_plans::text FROM pg_prepared_statements',
          );
    const statements = await server.query<{ query: string; calls: string; plan: number; exec: number; plans: string }>(
      `SELECT query, calls::text, plans::text, mean_plan_time AS plan, mean_exec_time AS exec FROM pg_stat_statements
       WHERE query ILIKE 'WITH%' OR query ILIKE 'INSERT%' ORDER BY calls DESC LIMIT 4`,
    );
    const quantile = (values: number[], q: number) => [...values].sort((a, b) => a - b)[Math.floor(values.length * q)];
    process.stdout.write(
      `| ${BLOCKS} blocks of ${CALLS} lone calls, ${GAP_MS} ms apart | call p50 ms | p90 ms | client CPU µs per call | server CPU µs per call |\n|---|---:|---:|---:|---:|\n`,
    );
    for (const [name, { sampled }] of Object.entries(systems)) {
      process.stdout.write(
        `| ${name} | ${median(sampled.walls).toFixed(3)} | ${quantile(sampled.walls, 0.9).toFixed(3)} | ${Math.round(
          sampled.clientCpuUs / sampled.calls,
        )} | ${Math.round((sampled.serverCpuS * 1e6) / sampled.calls)} |\n`,
      );
    }
    if (process.env.LEP_SPLIT === '1') {
      process.stdout.write(
        '\n| where the call goes, p50 µs | before `Client.query` | `Client.query` to its result | after |\n|---|---:|---:|---:|\n',
      );
      for (const [name, { sampled }] of Object.entries(systems)) {
        const part = (at: number) => Math.round(median(sampled.splits.map((split) => split[at])));
        process.stdout.write(`| ${name} | ${part(0)} | ${part(1)} | ${part(2)} |\n`);
      }
    }
    for (const row of prepared) {
      process.stdout.write(
        `\nThe module's prepared insert on the connection of the last call: ${row.generic_plans} executions of the generic plan, ${row.custom_plans} custom plans\n`,
      );
    }
    process.stdout.write(
      '\nThe insert statements (pg_stat_statements: planning ms per plan, execution ms per call):\n',
    );
    for (const row of statements) {
      const text = row.query.replace(/\s+/g, ' ').slice(0, 110);
      process.stdout.write(
        `  ${row.calls} calls, ${row.plans} plans, plan ${row.plan.toFixed(3)}, exec ${row.exec.toFixed(3)}: ${text}\n`,
      );
    }
  } finally {
    await raw.close();
    await module.app.close();
    await server.dispose();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
