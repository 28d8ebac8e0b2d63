/*
 * node -r ./test/support/swc-register.js bench/citus/queue-node-drain.ts: what one queue's drain costs the worker
 * node that holds it, against one server, and two builds compared on it. A Citus cluster of a coordinator and one
 * worker node and one server of the same settings (no CPU quotas), `pg_stat_statements` on each with nested statements
 * tracked (Citus runs a statement of a shard it holds inside the statement it plans: "local execution"). Interleaved,
 * QND_REPS times (default 3): W2 (bench/citus/workload.ts, QND_JOBS no-op jobs, default 5,000, one worker of 32 slots)
 * on one server, then on the cluster with the worker's instance on the node (QND_ENTRY `node`, the default) or on the
 * coordinator (`coordinator`, or both: `node,coordinator`), for the build in node_modules/nest-dedup-queue and, with
 * QND_BASELINE=<a package folder holding package.json and dist, inside this repository's node_modules>, for that
 * build too. QND_ANALYZE=1 analyzes the queue's table after the prefill (fresh statistics). Prints per drain the jobs/s
 * and the CPU per job of the worker process and of each server (/proc); with QND_STATEMENTS=1, after the last
 * repetition, each server's statements per job with their planning and execution µs per call. Needs the Debian
 * postgresql-15 package and Citus.
 */
import { Client } from 'pg';
import { startCitusCluster } from '../../test/support/citus-cluster';
import { TestPostgresServer, startPostgresServer } from '../../test/support/postgres-server';
import { procCpuMeter } from './server-processes';
import { BenchDatabase, SINGLE_SERVER_SETTINGS, median } from './workload';
import { Workload, loadWorkload } from './workload-build';

const count = (name: string, fallback: number) => Number(process.env[name] || fallback);
const JOBS = count('QND_JOBS', 5000);
const REPS = count('QND_REPS', 3);
const ENTRIES = (process.env.QND_ENTRY || 'node').split(',');
const STATEMENTS = process.env.QND_STATEMENTS === '1';
const QUEUE = 'q';

const log = (message: string) =>
  process.stderr.write(`[queue-node-drain ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

interface Target {
  label: string;
  database: BenchDatabase;
  /** The servers whose CPU is measured, in order, with their labels. */
  servers: Array<{ label: string; server: TestPostgresServer }>;
  /** Where the worker's instance connects, when not to `database.url`. */
  entryUrl?: string;
}

async function main(): Promise<void> {
  const builds: Array<{ name: string; workload: Workload }> = [{ name: 'current', workload: loadWorkload() }];
  if (process.env.QND_BASELINE) builds.push({ name: 'baseline', workload: loadWorkload(process.env.QND_BASELINE) });
  const statementSettings = { shared_preload_libraries: "'pg_stat_statements'" };
  const single = await startPostgresServer({
    binaries: 'debian',
    settings: { ...SINGLE_SERVER_SETTINGS, ...statementSettings },
  });
  const cluster = await startCitusCluster({ workers: 1, preload: ['pg_stat_statements'] }).catch(async (error) => {
    await single.dispose();
    throw error;
  });
  try {
    const [node] = cluster.workers;
    await single.query('CREATE EXTENSION pg_stat_statements');
    await cluster.coordinator.query('CREATE EXTENSION pg_stat_statements');
    for (const server of [single, cluster.coordinator, node]) {
      await server.query('ALTER SYSTEM SET pg_stat_statements.track_planning = on');
      await server.query(`ALTER SYSTEM SET pg_stat_statements.track = 'all'`);
      await server.query('SELECT pg_reload_conf()');
    }
    const clusterServers = [
      { label: 'coordinator', server: cluster.coordinator },
      { label: 'node', server: node },
    ];
    const targets: Target[] = [
      {
        label: 'one server',
        database: { url: single.url, distribution: 'single' },
        servers: [{ label: 'server', server: single }],
      },
      ...ENTRIES.map((entry) => ({
        label: `Citus 1 + 1, instance on the ${entry}`,
        database: { url: cluster.url, distribution: 'citus' as const },
        servers: clusterServers,
        ...(entry === 'node' && { entryUrl: node.url }),
      })),
    ];
    const results = new Map<string, Array<{ rate: number; worker: number; servers: number[] }>>();
    for (let rep = 1; rep <= REPS; rep++) {
      for (const build of rep % 2 ? builds : [...builds].reverse()) {
        for (const target of targets) {
          const schema = `qnd_${build.name}_${rep}`;
          const { workload } = build;
          await workload.prefill(target.database, schema, [QUEUE], JOBS);
          if (process.env.QND_ANALYZE === '1') await analyze(target.database.url, schema);
          for (const { server } of target.servers) await server.query('SELECT pg_stat_statements_reset()');
          const meter = procCpuMeter(target.servers.map(({ server }) => server.dataDir));
          const entries = target.entryUrl && [{ url: target.entryUrl, queueIndexes: [0], slotsPerQueue: 32 }];
          const run = await workload.drain(
            target.database,
            schema,
            [QUEUE],
            JOBS,
            meter,
            'split',
            undefined,
            entries || undefined,
          );
          const perJob = (seconds: number) => Math.round((seconds * 1e6) / run.count);
          const measured = {
            rate: Math.round(run.count / run.seconds),
            worker: perJob(run.workerCpuSeconds),
            servers: run.serverCpuSeconds.map(perJob),
          };
          const key = `${build.name}, ${target.label}`;
          results.set(key, [...(results.get(key) ?? []), measured]);
          log(
            `rep ${rep} ${key}: ${measured.rate} jobs/s; CPU µs/job worker ${measured.worker}, ` +
              target.servers.map(({ label }, i) => `${label} ${measured.servers[i]}`).join(', '),
          );
          if (STATEMENTS && rep === REPS) {
            for (const { label, server } of target.servers)
              await printStatements(`${key} / ${label}`, server, run.count);
          }
          await workload.dropSchema(target.database, schema);
        }
      }
    }
    console.log(`| W2, ${JOBS} no-op jobs, medians of ${REPS} | jobs/s | CPU µs per job: worker; servers |`);
    console.log('|---|---:|---|');
    for (const [key, runs] of results) {
      const servers = runs[0].servers.map((_, i) => median(runs.map((run) => run.servers[i])));
      console.log(
        `| ${key} | ${Math.round(median(runs.map((run) => run.rate)))} | ${Math.round(median(runs.map((run) => run.worker)))}; ${servers.map(Math.round).join(' / ')} |`,
      );
    }
  } finally {
    await cluster.stop();
    await single.dispose();
  }
}

async function analyze(url: string, schema: string): Promise<void> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`ANALYZE "${schema}".workflow_queue`);
  } finally {
    await client.end();
  }
}

/** The 14 statements of `server` that took the most planning and execution time, per job of the drain. */
async function printStatements(label: string, server: TestPostgresServer, jobs: number): Promise<void> {
  const rows = await server.query<{ calls: number; plan: number; exec: number; toplevel: boolean; query: string }>(
    `SELECT calls::int, round(total_plan_time * 1000 / calls)::int AS plan,
            round(total_exec_time * 1000 / calls)::int AS exec, toplevel,
            left(regexp_replace(query, '\\s+', ' ', 'g'), 140) AS query
     FROM pg_stat_statements WHERE calls > 0 AND query NOT LIKE '%pg_stat%'
     ORDER BY total_plan_time + total_exec_time DESC LIMIT 14`,
  );
  process.stdout.write(`  ${label}:\n`);
  for (const row of rows) {
    process.stdout.write(
      `    ${(row.calls / jobs).toFixed(3)}/job plan ${row.plan} exec ${row.exec} µs ` +
        `${row.toplevel ? '' : '(nested) '}${row.query}\n`,
    );
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
