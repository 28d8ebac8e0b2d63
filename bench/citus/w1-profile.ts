/*
 * node -r ./test/support/swc-register.js bench/citus/w1-profile.ts: where a W1 call's cost goes on Citus, and two
 * builds compared on it. One cluster of a coordinator and W1P_NODES worker nodes (default 2), every server in a CPU
 * cgroup of W1P_QUOTA CPUs (default 0.3; bench/citus/cpu-groups.ts) when the machine allows it, pg_stat_statements
 * on every node. Interleaved, W1P_REPS times (default 3): W1 (bench/citus/workload.ts, W1P_CALLS calls, default
 * 2,000, after W1P_WARM unmeasured calls, default 200, that open its connections) with the application on the
 * coordinator and on the worker nodes (W1P_ENTRY, `coordinator,nodes`), for the
 * build in node_modules/nest-dedup-queue and, with W1P_BASELINE=<a package folder holding package.json and dist,
 * inside this repository's node_modules>, for that build too. Prints per measurement the calls/s, each server's CPU
 * per call, each node's transactions per call and sessions opened; with W1P_STATEMENTS=1, each node's statements per call (calls,
 * planning and execution µs), the last repetition's. W1P_ANALYZE=1 analyzes the queue's table after the unmeasured
 * calls (fresh statistics); CITUS_NODE_SETTINGS sets the nodes' server settings (bench/citus/node-settings.ts).
 * Needs the Debian postgresql-15 package and Citus.
 */
import { loadavg } from 'node:os';
import { Client } from 'pg';
import { startCitusCluster } from '../../test/support/citus-cluster';
import { nodeSettingsFromEnv } from './node-settings';
import { CpuGroup, cpuGroupsUnavailable, groupCpuMeter, removeStaleGroups } from './cpu-groups';
import { postmasterPid, procCpuMeter } from './server-processes';
import { Workload, loadWorkload } from './workload-build';

const count = (name: string, fallback: number) => Number(process.env[name] || fallback);
const CALLS = count('W1P_CALLS', 2000);
const REPS = count('W1P_REPS', 3);
const NODES = count('W1P_NODES', 2);
const QUOTA = count('W1P_QUOTA', 0.3);
const ENTRIES = (process.env.W1P_ENTRY || 'coordinator,nodes').split(',');
const STATEMENTS = process.env.W1P_STATEMENTS === '1';
/** Unmeasured calls first (`warmUp`), so that every connection is open when W1 starts; 0 for a cold start. */
const WARM = Number(process.env.W1P_WARM ?? 200);

const log = (message: string) =>
  process.stderr.write(`[w1-profile ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

async function main(): Promise<void> {
  const builds: Array<{ name: string; workload: Workload }> = [{ name: 'current', workload: loadWorkload() }];
  if (process.env.W1P_BASELINE) {
    builds.push({ name: 'baseline', workload: loadWorkload(process.env.W1P_BASELINE) });
  }
  const cluster = await startCitusCluster({
    workers: NODES,
    preload: ['pg_stat_statements'],
    settings: nodeSettingsFromEnv(),
  });
  const groups: CpuGroup[] = [];
  try {
    const servers = [cluster.coordinator, ...cluster.workers];
    const labels = ['coordinator', ...cluster.workers.map((_, i) => `node ${i + 1}`)];
    await cluster.coordinator.query('CREATE EXTENSION pg_stat_statements');
    for (const server of servers) {
      await server.query('ALTER SYSTEM SET pg_stat_statements.track_planning = on');
      await server.query('SELECT pg_reload_conf()');
    }
    const dataDirs = await Promise.all(
      servers.map(async (server) => {
        const [{ dir }] = await server.query<{ dir: string }>(`SELECT current_setting('data_directory') AS dir`);
        return dir;
      }),
    );
    const unavailable = cpuGroupsUnavailable();
    if (unavailable) {
      log(`cgroups unavailable (${unavailable}): no quotas, CPU from /proc`);
    } else {
      removeStaleGroups();
      labels.forEach((label, i) => {
        const group = new CpuGroup(`w1p-${label.replace(' ', '')}`, QUOTA);
        group.place(postmasterPid(dataDirs[i]));
        groups.push(group);
      });
    }
    const limit = (on: boolean) => groups.forEach((group) => group.limit(on));
    const meter = groups.length ? groupCpuMeter(groups) : procCpuMeter(dataDirs);
    const commits = () =>
      Promise.all(
        servers.map(async (server) => {
          const [row] = await server.query<{ n: string; sessions: string }>(
            `SELECT xact_commit + xact_rollback AS n, sessions FROM pg_stat_database WHERE datname = current_database()`,
          );
          return { transactions: Number(row.n), sessions: Number(row.sessions) };
        }),
      );
    for (let rep = 1; rep <= REPS; rep++) {
      for (const build of rep % 2 ? builds : [...builds].reverse()) {
        for (const entry of ENTRIES) {
          const schema = `w1p_${build.name}_${entry}_${rep}`;
          limit(false);
          const migrating = await build.workload.bootModule(
            { url: cluster.url, distribution: 'citus' },
            schema,
            false,
            [{ name: build.workload.W1_QUEUE }],
          );
          const producers = entry === 'nodes' ? [] : [migrating];
          if (entry === 'nodes') {
            await migrating.app.close();
            for (const url of cluster.workerUrls) {
              producers.push(
                await build.workload.bootModule({ url, distribution: 'citus' }, schema, false, [
                  { name: build.workload.W1_QUEUE },
                ]),
              );
            }
          }
          await build.workload.warmUp(producers, WARM);
          if (process.env.W1P_ANALYZE === '1') await cluster.coordinator.query(`ANALYZE "${schema}".workflow_queue`);
          for (const server of servers) await server.query('SELECT pg_stat_statements_reset()');
          const before = await commits();
          limit(true);
          const run = await build.workload.enqueueStorm(producers, CALLS, meter);
          limit(false);
          const after = await commits();
          for (const producer of producers) await producer.app.close();
          const perCall = (seconds: number) => Math.round((seconds * 1e6) / run.count);
          log(
            `rep ${rep} ${build.name}, apps on the ${entry}: ${Math.round(run.count / run.seconds)} calls/s; CPU µs/call ` +
              labels.map((label, i) => `${label} ${perCall(run.serverCpuSeconds[i])}`).join(', ') +
              `; worker ${perCall(run.workerCpuSeconds)}; transactions/call ` +
              labels
                .map(
                  (label, i) => `${label} ${((after[i].transactions - before[i].transactions) / run.count).toFixed(2)}`,
                )
                .join(', ') +
              `; sessions ` +
              labels.map((label, i) => `${label} ${after[i].sessions - before[i].sessions}`).join(', ') +
              `; load ${loadavg()[0].toFixed(1)}`,
          );
          if (STATEMENTS && rep === REPS) {
            for (const [i, server] of servers.entries()) {
              const rows = await server.query<{ calls: number; plan: number; exec: number; query: string }>(
                `SELECT calls::int, round(total_plan_time * 1000 / calls)::int AS plan,
                        round(total_exec_time * 1000 / calls)::int AS exec,
                        left(regexp_replace(query, '\\s+', ' ', 'g'), 160) AS query
                 FROM pg_stat_statements WHERE calls > 0 AND query NOT LIKE '%pg_stat%'
                 ORDER BY total_exec_time + total_plan_time DESC LIMIT 12`,
              );
              process.stdout.write(`  ${build.name} / ${entry} / ${labels[i]}:\n`);
              for (const row of rows) {
                process.stdout.write(
                  `    ${(row.calls / run.count).toFixed(2)}/call plan ${row.plan} exec ${row.exec} µs  ${row.query}\n`,
                );
              }
            }
          }
          const client = new Client({ connectionString: cluster.url });
          await client.connect();
          await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
          await client.end();
        }
      }
    }
  } finally {
    for (const group of groups) group.limit(false);
    await cluster.stop();
    for (const group of groups) group.remove();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
