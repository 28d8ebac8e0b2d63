/*
 * npm run bench -- --citus-scale (node -r ./test/support/swc-register.js bench/citus/scale.ts): issue 36's
 * simulation of machines of one size. One server and Citus clusters of a coordinator and 2 and 4 worker nodes (the
 * Debian PostgreSQL 15 binaries, test/support/citus-cluster.ts), every server in a CPU cgroup of its own held to
 * CITUS_SCALE_QUOTA CPUs (default 0.3; bench/citus/cpu-groups.ts), its postmaster and every child placed before
 * anything is measured, the worker process (this one, running the module) unlimited. Interleaved, medians of
 * CITUS_SCALE_REPS (default 6):
 *
 * - W1: CITUS_SCALE_CALLS enqueue calls (default 4,000) from 16 concurrent callers over a tenth as many keys, after
 *   200 unmeasured calls that open every connection it uses (`warmUp`);
 * - W2: CITUS_SCALE_JOBS no-op workflows (default 5,000) drained by one worker (CITUS_SCALE_SLOTS, default 32, slots
 *   shared by the queues), in one queue, two and four, the queues held by different worker nodes (i modulo the
 *   nodes), and one hot queue declared with `shards: 8`;
 *
 * each cluster with its application instances on the coordinator and on its worker nodes (CITUS_SCALE_ENTRY,
 * `coordinator,nodes`): on the nodes, one producer per node shares W1's callers, and W2's queues are drained by an
 * instance on the node that holds each (the hot queue by one on every node);
 *
 * with each server's CPU per call or job (`cpuacct.usage` of its group) and its share of the quota, which says which
 * server is saturated. Each measurement has a schema of its own, created and filled (W2's prefill) with the quotas of
 * its servers lifted and dropped afterwards; only the measurement runs under them. Without cgroups (not root, no v1
 * `cpu` and `cpuacct` hierarchies) it says so and runs without quotas, the CPU read from /proc; with
 * CITUS_SCALE_QUOTA=none, the groups are made without a quota and only count. Prints the tables and
 * writes bench/results/citus-scale-<time>.json and citus-scale-latest.md. The cgroups and servers are removed at the
 * end, on an error and on SIGINT or SIGTERM; a later run removes the groups of a run that was killed.
 * CITUS_SCALE_WORKLOADS (e.g. `w1`, or `w2x1,w2x4`) measures only those workloads (default all:
 * w1,w2x1,w2x2,w2x4,w2hot).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { CitusCluster, startCitusCluster } from '../../test/support/citus-cluster';
import { startPostgresServer, TestPostgresServer } from '../../test/support/postgres-server';
import { nodeSettingsFromEnv } from './node-settings';
import { CpuGroup, cpuGroupsUnavailable, groupCpuMeter, removeStaleGroups } from './cpu-groups';
import { CpuMeter, postmasterPid, procCpuMeter } from './server-processes';
import {
  BenchDatabase,
  bootModule,
  drain,
  DrainEntry,
  dropSchema,
  enqueueStorm,
  Measured,
  median,
  prefill,
  queuesSpreadOver,
  SINGLE_SERVER_SETTINGS,
  W1_QUEUE,
  warmUp,
  WORKER_SLOTS,
} from './workload';

const RESULTS_DIR = join(__dirname, '..', 'results');
/** W1's unmeasured calls first, with the quotas lifted: every connection open when it starts (`warmUp`). */
const W1_WARM_UP_CALLS = 200;
/** A server whose CPU reaches this share of its quota during a measurement is what limits it. */
const SATURATED = 0.9;

const log = (message: string) =>
  process.stderr.write(`[citus-scale ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

interface Workload {
  id: string;
  /** The row of the table. */
  row: string;
  /** Its name in the saturation row. */
  short: string;
  /** W2's queues; 0 for W1. */
  queues: number;
  /** One hot queue declared with `shards: queues` (on one server the option leaves it whole). */
  hot?: boolean;
}

const WORKLOADS: Workload[] = [
  { id: 'w1', row: 'W1 enqueue calls/s', short: 'W1', queues: 0 },
  { id: 'w2x1', row: 'W2 one queue, jobs/s', short: 'one queue', queues: 1 },
  { id: 'w2x2', row: 'W2 two queues', short: 'two queues', queues: 2 },
  { id: 'w2x4', row: 'W2 four queues', short: 'four queues', queues: 4 },
  { id: 'w2hot', row: 'W2 one hot queue, `shards: 8`', short: 'hot queue', queues: 8, hot: true },
];

/** An environment setting: a number within bounds, or the default; anything else stops the run before it starts. */
function setting(name: string, fallback: number, valid: (value: number) => boolean, what: string): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || !valid(value)) throw new Error(`${name}=${raw}: expected ${what}`);
  return value;
}

const positiveInteger = (minimum: number) => (value: number) => Number.isInteger(value) && value >= minimum;

function readSettings() {
  return {
    /** 0 (or `none`): no quotas, as on a machine without cgroups. */
    quota:
      process.env.CITUS_SCALE_QUOTA === 'none'
        ? 0
        : setting('CITUS_SCALE_QUOTA', 0.3, (v) => v >= 0 && v <= cpus().length, 'CPUs, 0 to the cores, or none'),
    reps: setting('CITUS_SCALE_REPS', 6, positiveInteger(1), 'an integer of at least 1'),
    jobs: setting('CITUS_SCALE_JOBS', 5000, positiveInteger(4), 'an integer of at least 4'),
    calls: setting('CITUS_SCALE_CALLS', 4000, positiveInteger(16), 'an integer of at least 16'),
    /** Where a cluster's application instances connect: its coordinator, its worker nodes, or both in turn. */
    entries: (process.env.CITUS_SCALE_ENTRY || 'coordinator,nodes').split(',').map((raw) => {
      if (raw !== 'coordinator' && raw !== 'nodes') {
        throw new Error(`CITUS_SCALE_ENTRY=${process.env.CITUS_SCALE_ENTRY}: expected coordinator, nodes or both`);
      }
      return raw;
    }),
    /** The workloads to measure, by ID (`w1,w2x1,w2x2,w2x4,w2hot`); all by default. */
    workloads: (process.env.CITUS_SCALE_WORKLOADS || WORKLOADS.map((workload) => workload.id).join(','))
      .split(',')
      .map((raw) => {
        const workload = WORKLOADS.find((candidate) => candidate.id === raw);
        if (!workload) {
          throw new Error(
            `CITUS_SCALE_WORKLOADS=${process.env.CITUS_SCALE_WORKLOADS}: expected some of ${WORKLOADS.map((w) => w.id).join(', ')}`,
          );
        }
        return workload;
      }),
    nodes: (process.env.CITUS_SCALE_NODES || '2,4').split(',').map((raw) => {
      if (!positiveInteger(1)(Number(raw))) {
        throw new Error(`CITUS_SCALE_NODES=${process.env.CITUS_SCALE_NODES}: expected worker-node counts, e.g. 2,4`);
      }
      return Number(raw);
    }),
  };
}

let settings: ReturnType<typeof readSettings>;
try {
  settings = readSettings();
} catch (error) {
  console.error((error as Error).message);
  process.exit(2);
}

interface Server {
  label: string;
  dataDir: string;
  group?: CpuGroup;
}

interface Target extends BenchDatabase {
  id: string;
  column: string;
  servers: Server[];
  /** Eight queue names, the i-th on worker node i modulo the nodes. */
  queues: string[];
  /** On a cluster whose instances connect to its worker nodes: their URLs, node i's at i. */
  nodeUrls?: readonly string[];
}

/** The CPU of the target's servers: from their cgroups, or (without cgroups) from /proc. */
function meterOf(target: Target): CpuMeter {
  const groups = target.servers.flatMap((server) => (server.group ? [server.group] : []));
  return groups.length === target.servers.length
    ? groupCpuMeter(groups)
    : procCpuMeter(target.servers.map((server) => server.dataDir));
}

/** One measurement, per call (W1) or job (W2). */
interface Sample {
  perSecond: number;
  workerUs: number;
  serverUs: number[];
  /** Each server's CPU over the measurement's time and its capacity (the quota; without quotas, one core). */
  share: number[];
  /** Each server's share of CFS periods in which its quota stopped it (with quotas). */
  throttled?: number[];
  loadAverage: number;
}

/** What to undo at the end, latest first: the servers are stopped before their groups are removed. */
const undo: Array<() => unknown> = [];
let cleaning: Promise<void> | undefined;
function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    for (const step of undo.reverse()) {
      try {
        await step();
      } catch (error) {
        log(`clean-up: ${(error as Error).message}`);
      }
    }
  })();
  return cleaning;
}
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
] as const) {
  // `on`, not `once`: a second signal (the terminal's and `npm run`'s) must not end the clean-up half-way.
  process.on(signal, () => {
    log(`${signal}: stopping the servers and removing the cgroups`);
    void cleanUp().finally(() => process.exit(code));
  });
}

function limit(targets: readonly Target[], on: boolean): void {
  for (const target of targets) for (const server of target.servers) server.group?.limit(on);
}

function sample(target: Target, run: Measured, capacity: number, throttledBefore?: number[][]): Sample {
  const perUnit = (seconds: number) => (seconds * 1e6) / run.count;
  return {
    perSecond: run.count / run.seconds,
    workerUs: perUnit(run.workerCpuSeconds),
    serverUs: run.serverCpuSeconds.map(perUnit),
    share: run.serverCpuSeconds.map((seconds) => seconds / (run.seconds * capacity)),
    throttled: throttledBefore
      ? target.servers.map((server, i) => {
          const now = server.group!.throttling();
          const periods = now.periods - throttledBefore[i][0];
          return periods ? (now.throttled - throttledBefore[i][1]) / periods : 0;
        })
      : undefined,
    loadAverage: loadavg()[0],
  };
}

/** One workload on one target, in a schema of its own: set up with the quotas lifted, measured under them. */
async function measure(target: Target, workload: Workload, rep: number, capacity: number): Promise<Sample> {
  const schema = `bench_scale_${workload.id}_${rep}`;
  const grouped = target.servers.every((server) => server.group);
  const throttling = () =>
    grouped
      ? target.servers.map((server) => {
          const { periods, throttled } = server.group!.throttling();
          return [periods, throttled];
        })
      : undefined;
  limit([target], false);
  try {
    if (workload.queues === 0) {
      const migrating = await bootModule(target, schema, false, [{ name: W1_QUEUE }]);
      const producers = target.nodeUrls ? [] : [migrating];
      try {
        if (target.nodeUrls) await migrating.app.close();
        for (const url of target.nodeUrls ?? []) {
          producers.push(await bootModule({ ...target, url }, schema, false, [{ name: W1_QUEUE }]));
        }
        await warmUp(producers, W1_WARM_UP_CALLS);
        limit([target], true);
        const before = throttling();
        const run = await enqueueStorm(producers, settings.calls, meterOf(target));
        return sample(target, run, capacity, before);
      } finally {
        limit([target], false);
        for (const producer of producers) await producer.app.close();
      }
    }
    const queues = target.queues.slice(0, workload.hot ? 1 : workload.queues);
    const shards = workload.hot ? workload.queues : undefined;
    await prefill(target, schema, queues, settings.jobs, shards);
    limit([target], true);
    const before = throttling();
    const run = await drain(
      target,
      schema,
      queues,
      settings.jobs,
      meterOf(target),
      'split',
      shards,
      entriesOf(target, queues, !!workload.hot),
    );
    return sample(target, run, capacity, before);
  } finally {
    limit([target], false);
    await dropSchema(target, schema);
    limit([target], true);
  }
}

/**
 * A drain's workers on a cluster whose instances connect to its worker nodes: node i's instance drains the queues it
 * holds (the i-th of `target.queues` is on node i modulo the nodes), or, for a hot queue spread over shards, every
 * node's instance drains it; the worker's 32 slots are shared as one worker would share them.
 */
function entriesOf(target: Target, queues: readonly string[], hot: boolean): DrainEntry[] | undefined {
  const urls = target.nodeUrls;
  if (!urls) return undefined;
  if (hot) {
    const slotsPerQueue = Math.max(1, Math.floor(WORKER_SLOTS / urls.length));
    return urls.map((url) => ({ url, queueIndexes: [0], slotsPerQueue }));
  }
  const slotsPerQueue = Math.max(1, Math.floor(WORKER_SLOTS / queues.length));
  return urls
    .map((url, node) => ({
      url,
      queueIndexes: queues.flatMap((_, i) => (i % urls.length === node ? [i] : [])),
      slotsPerQueue,
    }))
    .filter((entry) => entry.queueIndexes.length > 0);
}

const wholeNumber = (value: number) => Math.round(value).toLocaleString('en-US');
const percent = (share: number) => `${Math.round(share * 100)}%`;

function saturation(target: Target, samples: Record<string, Sample[]>): string {
  return settings.workloads
    .map((workload) => {
      const shares = target.servers.map((_, i) => median(samples[workload.id].map((s) => s.share[i])));
      const at = target.servers.flatMap((server, i) =>
        shares[i] >= SATURATED ? [`${server.label} (${percent(shares[i])})`] : [],
      );
      if (at.length) return `${workload.short}: ${at.join(', ')}`;
      const top = shares.indexOf(Math.max(...shares));
      return `${workload.short}: none (highest ${target.servers[top].label}, ${percent(shares[top])})`;
    })
    .join('; ');
}

function report(
  targets: readonly Target[],
  results: Record<string, Record<string, Sample[]>>,
  header: string,
  capacityName: string,
): string {
  const lines = [
    header,
    '',
    `| | ${targets.map((t) => t.column).join(' | ')} |`,
    `|---|${targets.map(() => '---:').join('|')}|`,
    ...settings.workloads.map(
      (workload) =>
        `| ${workload.row} | ${targets
          .map((t) => wholeNumber(median(results[t.id][workload.id].map((s) => s.perSecond))))
          .join(' | ')} |`,
    ),
    `| saturated (a server at ≥ ${percent(SATURATED)} of ${capacityName}) | ${targets
      .map((t) => saturation(t, results[t.id]))
      .join(' | ')} |`,
  ];
  for (const target of targets) {
    lines.push(
      '',
      `${target.column}: CPU per call (W1) or job (W2), µs, and each server's share of ${capacityName}`,
      '',
      `| | per second | worker process | ${target.servers.map((s) => s.label).join(' | ')} |`,
      `|---|---:|---:|${target.servers.map(() => '---:').join('|')}|`,
      ...settings.workloads.map((workload) => {
        const samples = results[target.id][workload.id];
        const servers = target.servers.map((_, i) => {
          const us = median(samples.map((s) => s.serverUs[i]));
          return `${wholeNumber(us)} (${percent(median(samples.map((s) => s.share[i])))})`;
        });
        return `| ${workload.short} | ${wholeNumber(median(samples.map((s) => s.perSecond)))} | ${wholeNumber(
          median(samples.map((s) => s.workerUs)),
        )} | ${servers.join(' | ')} |`;
      }),
    );
  }
  return `${lines.join('\n')}\n`;
}

/** The commit measured, `+changes` when the library's source differs from it. */
function commitMeasured(): string {
  const git = (...args: string[]) =>
    execFileSync('git', args, { cwd: __dirname, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  try {
    const changed = git('status', '--porcelain', '--', '../../packages/nest-dedup-queue/src');
    return `${git('rev-parse', '--short', 'HEAD')}${changed ? '+changes' : ''}`;
  } catch {
    return 'unknown';
  }
}

async function main(): Promise<void> {
  const startedAt = new Date();
  const commit = commitMeasured();
  const unavailable = cpuGroupsUnavailable();
  // Why there are no quotas, if there are none: cgroups unavailable, or none asked for (the groups then only count).
  const noQuota = unavailable
    ? `cgroups unavailable: ${unavailable}`
    : settings.quota === 0
      ? 'CITUS_SCALE_QUOTA=none'
      : undefined;
  if (unavailable) {
    log(`cgroups unavailable (${unavailable}): running WITHOUT CPU quotas; each server's CPU is read from /proc`);
  } else {
    const stale = removeStaleGroups();
    if (stale.length) log(`removed ${stale.length} cgroup(s) left by an earlier run: ${stale.join(', ')}`);
    log(
      noQuota
        ? `${noQuota}: each server in a cgroup WITHOUT a CPU quota, to read its CPU`
        : `each server in a cgroup of ${settings.quota} CPU (cpu.cfs_quota_us ${settings.quota * 100_000} per 100,000)`,
    );
  }
  const capacity = noQuota ? 1 : settings.quota;
  const capacityName = noQuota ? 'one core (no quota)' : 'its quota';
  const quotaLabel = noQuota ? 'no quota' : `${settings.quota} CPU`;
  const eachLabel = noQuota ? 'no quota' : `${settings.quota} each`;

  log(`starting one server and Citus clusters of 1 + ${settings.nodes.join(', 1 + ')} nodes`);
  const single: TestPostgresServer = await startPostgresServer({
    binaries: 'debian',
    settings: SINGLE_SERVER_SETTINGS,
  });
  undo.push(() => single.dispose());
  const clusters: CitusCluster[] = [];
  for (const workers of settings.nodes) {
    const cluster = await startCitusCluster({ workers, settings: nodeSettingsFromEnv() });
    undo.push(() => cluster.stop());
    clusters.push(cluster);
  }

  const targets: Target[] = [
    {
      id: 'single',
      column: `one server, ${quotaLabel}`,
      url: single.url,
      distribution: 'single',
      servers: [{ label: 'server', dataDir: single.dataDir }],
      queues: Array.from({ length: 8 }, (_, i) => `q${i}`),
    },
    ...clusters.flatMap((cluster) =>
      settings.entries.map((entry): Target => ({
        id: `citus${cluster.workers.length}-${entry}`,
        column: `Citus 1 + ${cluster.workers.length} nodes, ${eachLabel}, apps on the ${entry === 'nodes' ? 'worker nodes' : 'coordinator'}`,
        url: cluster.url,
        distribution: 'citus',
        servers: [
          { label: 'coordinator', dataDir: cluster.coordinator.dataDir },
          ...cluster.workers.map((worker, i) => ({ label: `node ${i + 1}`, dataDir: worker.dataDir })),
        ],
        queues: [],
        ...(entry === 'nodes' && { nodeUrls: cluster.workerUrls }),
      })),
    ),
  ];

  // Every server into its group before anything is measured: the postmaster, then each child it has.
  // (A cluster measured with its apps on the coordinator and on the nodes is two targets of one group per server.)
  const groups = new Map<string, CpuGroup>();
  for (const target of unavailable ? [] : targets) {
    for (const server of target.servers) {
      let group = groups.get(server.dataDir);
      if (!group) {
        const made = new CpuGroup(`${target.id.split('-')[0]}-${server.label.replace(' ', '')}`, settings.quota);
        undo.unshift(() => made.remove()); // after the servers are stopped
        const placed = made.place(postmasterPid(server.dataDir));
        log(`${target.column}, ${server.label}: ${placed} processes placed in ${made.name}`);
        groups.set(server.dataDir, (group = made));
      }
      server.group = group;
    }
  }
  for (const cluster of clusters) {
    const onCluster = targets.filter((target) => target.url === cluster.url);
    limit(onCluster, false);
    const queues = await queuesSpreadOver(cluster, 8);
    limit(onCluster, true);
    for (const target of onCluster) target.queues = queues;
    log(
      `Citus 1 + ${cluster.workers.length}: queues ${queues.join(', ')} (node ${queues.map((_, i) => (i % cluster.workers.length) + 1).join(', ')})`,
    );
  }

  const results: Record<string, Record<string, Sample[]>> = Object.fromEntries(
    targets.map((target) => [target.id, Object.fromEntries(settings.workloads.map((w) => [w.id, [] as Sample[]]))]),
  );
  const loadAtStart = loadavg()[0];
  for (let rep = 1; rep <= settings.reps; rep++) {
    for (const workload of settings.workloads) {
      // Each repetition rotates the order, so that no target always runs first.
      for (const [i] of targets.entries()) {
        const target = targets[(i + rep - 1) % targets.length];
        const result = await measure(target, workload, rep, capacity);
        results[target.id][workload.id].push(result);
        log(
          `rep ${rep}/${settings.reps} ${workload.short}, ${target.column}: ${wholeNumber(result.perSecond)}/s; ` +
            target.servers
              .map((s, j) => `${s.label} ${Math.round(result.serverUs[j])} µs ${percent(result.share[j])}`)
              .join(', ') +
            `; worker ${Math.round(result.workerUs)} µs; load ${result.loadAverage.toFixed(1)}`,
        );
      }
    }
  }

  const durationS = (Date.now() - startedAt.getTime()) / 1000;
  const loads = Object.values(results).flatMap((byWorkload) =>
    Object.values(byWorkload).flatMap((samples) => samples.map((s) => s.loadAverage)),
  );
  const cores = cpus().length;
  const header =
    `Citus scale-out (${startedAt.toISOString().slice(0, 16)}Z, commit ${commit}, ${Math.round(durationS)} s): ` +
    (noQuota
      ? `NO CPU quotas (${noQuota})`
      : `every server in a cgroup of ${settings.quota} CPU (cfs quota ${settings.quota * 100_000} µs per 100,000), the worker process unlimited`) +
    `; medians of ${settings.reps}, W1 ${settings.calls.toLocaleString('en-US')} calls, W2 ${settings.jobs.toLocaleString('en-US')} jobs; ` +
    `${cpus()[0]?.model ?? 'unknown CPU'}, ${cores} cores, load average (1 min) ${Math.min(loadAtStart, ...loads).toFixed(1)} to ${Math.max(loadAtStart, ...loads).toFixed(1)}.`;
  const markdown = report(targets, results, header, capacityName);

  mkdirSync(RESULTS_DIR, { recursive: true });
  const stamp = startedAt.toISOString().replace(/[:.]/g, '-');
  const json = {
    startedAt: startedAt.toISOString(),
    durationS,
    commit,
    settings: { ...settings, cgroups: !unavailable, noQuota: noQuota ?? null, saturatedAt: SATURATED },
    machine: { cpuModel: cpus()[0]?.model, cores, loadAverageAtStart: loadAtStart },
    targets: targets.map((t) => ({
      id: t.id,
      column: t.column,
      servers: t.servers.map((s) => s.label),
      queues: t.queues,
    })),
    results,
  };
  writeFileSync(join(RESULTS_DIR, `citus-scale-${stamp}.json`), `${JSON.stringify(json, null, 2)}\n`);
  writeFileSync(join(RESULTS_DIR, 'citus-scale-latest.md'), markdown);
  process.stdout.write(`\n${markdown}\nresults in bench/results/citus-scale-${stamp}.json and citus-scale-latest.md\n`);
}

void main()
  .then(
    () => 0,
    (error: unknown) => {
      console.error(error);
      return 1;
    },
  )
  .then(async (code) => {
    await cleanUp();
    process.exit(code);
  });
