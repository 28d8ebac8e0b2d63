import { randomUUID } from 'node:crypto';
import { availableParallelism, hostname } from 'node:os';
import {
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_INPUT_LIMITS,
  DEFAULT_LEASE_MS,
  DEFAULT_MAX_RECOVERY_ATTEMPTS,
  DEFAULT_POLL_INTERVAL_MS,
  DEFAULT_RETENTION_MS,
  DEFAULT_RETRY_ATTEMPTS,
  DEFAULT_RETRY_DELAY_MS,
  DEFAULT_SCHEMA,
  DEFAULT_SHUTDOWN_GRACE_MS,
  DEFAULT_THREAD_IDLE_MS,
  DEFAULT_WORKER_CONCURRENCY,
  SHARD_SEPARATOR,
} from './dedup-queue.constants';
import { DedupQueueConfigurationError } from './errors/dedup-queue-configuration.error';
import type { DedupQueueModuleOptions } from './interfaces/dedup-queue-options.interface';
import type { IsolationResourceLimits } from './interfaces/isolation-options.interface';
import type { InputLimits } from './interfaces/input-limits.interface';
import {
  DatabaseEndpoint,
  EndpointSettings,
  describeEndpoint,
  maskedUrl,
  postgresUrlProblem,
} from './utils/database-endpoint';
import { unknownKey } from './utils/known-keys';
import type { QueueLimits, QueueOptions, RateLimit } from './interfaces/queue-options.interface';
import { exceedsCharacters } from './utils/character-length';
import { UnknownQueueError } from './errors/unknown-queue.error';

/** Queues declared together and where: one `registerQueue()` call (its `QueueRegistration`). */
export interface QueueDeclarations {
  readonly queues: readonly QueueOptions[];
  readonly declaredAt: string;
}

/** A queue's limits with defaults applied (as declared, or as changed at run time). */
export interface ResolvedQueue {
  name: string;
  concurrency?: number;
  workerConcurrency: number;
  partitionConcurrency?: number;
  rateLimit?: RateLimit;
  /** Declared shards above 1 (`QueueOptions.shards`): the queue takes no limit that holds across the whole queue. */
  shards?: number;
}

/** The most shards a queue may declare (`QueueOptions.shards`). */
export const MAX_QUEUE_SHARDS = 64;

/** The limits that hold across a whole queue, which a queue declaring shards cannot take. */
export const QUEUE_WIDE_LIMIT_KEYS: readonly (keyof QueueLimits)[] = [
  'concurrency',
  'partitionConcurrency',
  'rateLimit',
];

/** The pool of worker threads for isolated bodies (`forRoot({ isolation })`), with defaults applied. */
export interface ResolvedIsolation {
  threads: number;
  resourceLimits?: IsolationResourceLimits;
  /** Undefined: threads are never recycled for their number of runs. */
  maxRunsPerThread?: number;
  idleTimeoutMs: number;
  /** Undefined: the threads take the process's own. */
  execArgv?: string[];
}

/** A node's host and port. */
export interface NodeAddress {
  host: string;
  port: number;
}

/** The module's options, validated, with defaults applied. */
export class DedupQueueConfig {
  readonly schema!: string;
  /** Every declared queue: `forRoot({ queues })` and each `registerQueue()`. */
  readonly queues!: ReadonlyMap<string, ResolvedQueue>;
  /** The queues this process drains (all declared ones unless `worker: { queues }` says otherwise). */
  readonly workerQueues!: ReadonlySet<string>;
  readonly executorId!: string;
  /** Workflows this process may enqueue by name without having them (`forRoot({ externalWorkflows })`). */
  readonly externalWorkflows!: ReadonlySet<string>;
  readonly pollIntervalMs!: number;
  readonly shutdownGraceMs!: number;
  readonly leaseMs!: number;
  readonly heartbeatIntervalMs!: number;
  readonly maxRecoveryAttempts!: number;
  /** null: keep finished workflows forever. */
  readonly retentionMs!: number | null;
  readonly endpoint!: DatabaseEndpoint;
  readonly connectTimeoutMs!: number;
  readonly retryAttempts!: number;
  readonly retryDelayMs!: number;
  /** Behind a transaction pooler: no named prepared statements, no session state. */
  readonly transactionPooler!: boolean;
  /**
   * How wake-ups arrive: LISTEN on a pooled connection, on a direct connection to `url`, or not at all (polling
   * only).
   */
  readonly listen!: { mode: 'pooled' } | { mode: 'direct'; url: string } | { mode: 'off'; reason: string };
  /** Plain tables on one server, or tables distributed by queue on a Citus cluster. */
  readonly distribution!: 'single' | 'citus';
  /**
   * On Citus, where this process reaches each node to LISTEN on it: a node's `name:port` as `pg_dist_node` gives it,
   * mapped to the address this process connects to (`citus.nodeAddresses`); a node not mapped is reached as named.
   */
  readonly citusNodeAddresses!: ReadonlyMap<string, NodeAddress>;
  readonly isolation!: ResolvedIsolation;
  /** What callers may store, with the defaults applied. */
  readonly inputLimits!: Required<InputLimits>;

  constructor(values: Omit<DedupQueueConfig, 'worker'>) {
    Object.assign(this, values);
  }

  /** Whether this process runs workflows at all. */
  get worker(): boolean {
    return this.workerQueues.size > 0;
  }
}

const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,39}$/;

/** Every key of `DedupQueueModuleOptions`: any other is refused at boot, naming the near miss. */
const MODULE_OPTION_KEYS: readonly string[] = [
  'connection',
  'dataSource',
  'schema',
  'queues',
  'worker',
  'executorId',
  'pollIntervalMs',
  'shutdownGraceMs',
  'leaseMs',
  'heartbeatIntervalMs',
  'connectTimeoutMs',
  'retryAttempts',
  'retryDelay',
  'pooler',
  'listen',
  'maxRecoveryAttempts',
  'retentionMs',
  'metrics',
  'externalWorkflows',
  'distribution',
  'citus',
  'isolation',
  'inputLimits',
  'isGlobal',
] satisfies readonly (keyof DedupQueueModuleOptions | 'isGlobal')[];

/** The limits a queue takes, declared or changed at run time. */
export const QUEUE_LIMIT_KEYS: readonly (keyof QueueLimits)[] = [
  'concurrency',
  'workerConcurrency',
  'partitionConcurrency',
  'rateLimit',
];

/** Validates the module options at boot; a message says which option to change. */
export function resolveConfig(
  options: DedupQueueModuleOptions,
  registrations: readonly QueueDeclarations[] = [],
): DedupQueueConfig {
  const fail = (message: string): never => {
    throw new DedupQueueConfigurationError(`DedupQueueModule: ${message}`);
  };
  if (!options || typeof options !== 'object') fail('options are required');
  const unknownOption = unknownKey(options, MODULE_OPTION_KEYS);
  if (unknownOption) fail(`\`${unknownOption.key}\` ${unknownOption.reason}`);
  if (!!options.connection === !!options.dataSource) fail('give exactly one of `connection` and `dataSource`');
  if (options.connection && 'url' in options.connection && !options.connection.url && !options.connection.host) {
    fail(
      `\`connection.url\` is ${options.connection.url === '' ? 'an empty string' : String(options.connection.url)} ` +
        '(is the environment variable it is read from, such as DATABASE_URL, set?). Pass a Postgres URL: ' +
        "forRoot({ connection: { url: 'postgres://user:password@host:5432/database' } }), or host, port, " +
        'database, username and password instead of `url`, or an existing TypeORM `dataSource`',
    );
  }
  assertPostgresUrl('connection.url', options.connection?.url, fail);
  assertPostgresUrl('dataSource.options.url', (options.dataSource?.options as EndpointSettings | undefined)?.url, fail);
  const schema = options.schema ?? DEFAULT_SCHEMA;
  if (!SCHEMA_NAME.test(schema)) {
    fail(`schema "${schema}" must be 1 to 40 lowercase letters, digits or underscores, not starting with a digit`);
  }
  if (options.distribution !== undefined && options.distribution !== 'single' && options.distribution !== 'citus') {
    fail("`distribution` must be 'single' (one PostgreSQL server) or 'citus' (the coordinator of a Citus cluster)");
  }
  const queues = resolveQueues(options.queues, registrations, fail);
  const worker = options.worker ?? true;
  if (typeof worker === 'object' && !Array.isArray(worker?.queues)) {
    fail('`worker` must be true, false or { queues: [...declared queue names] }');
  }
  const workerQueues = new Set(typeof worker === 'object' ? worker.queues : worker ? queues.keys() : []);
  if (typeof worker === 'object') {
    for (const name of workerQueues) {
      if (!queues.has(name)) fail(`\`worker.queues\` names "${name}", which is not a declared queue`);
    }
  }
  const executorId = options.executorId ?? `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
  if (typeof executorId !== 'string' || executorId.length === 0 || exceedsCharacters(executorId, 255)) {
    fail('`executorId` must be a string of 1 to 255 characters');
  }
  const leaseMs = positiveIntegerOrUndefined(options.leaseMs, 'leaseMs', fail) ?? DEFAULT_LEASE_MS;
  const heartbeatIntervalMs =
    positiveIntegerOrUndefined(options.heartbeatIntervalMs, 'heartbeatIntervalMs', fail) ?? Math.ceil(leaseMs / 3);
  if (heartbeatIntervalMs >= leaseMs) fail('`heartbeatIntervalMs` must be shorter than `leaseMs`');
  const endpoint = describeEndpoint(
    (options.dataSource?.options ?? options.connection) as EndpointSettings | undefined,
  );
  if (options.pooler !== undefined && options.pooler !== 'transaction' && options.pooler !== 'none') {
    fail("`pooler` must be 'transaction' (PgBouncer pool_mode = transaction, Supavisor, ...) or 'none'");
  }
  const transactionPooler = options.pooler === 'transaction';
  return new DedupQueueConfig({
    distribution: options.distribution ?? 'single',
    citusNodeAddresses: resolveCitusNodeAddresses(options, fail),
    isolation: resolveIsolation(options.isolation, fail),
    inputLimits: resolveInputLimits(options.inputLimits, fail),
    schema,
    endpoint,
    connectTimeoutMs:
      positiveIntegerOrUndefined(options.connectTimeoutMs, 'connectTimeoutMs', fail) ??
      endpoint.connectTimeoutMs ??
      options.connection?.connectTimeoutMS ??
      DEFAULT_CONNECT_TIMEOUT_MS,
    retryAttempts: nonNegativeInteger(options.retryAttempts, 'retryAttempts', fail) ?? DEFAULT_RETRY_ATTEMPTS,
    retryDelayMs: nonNegativeInteger(options.retryDelay, 'retryDelay', fail) ?? DEFAULT_RETRY_DELAY_MS,
    transactionPooler,
    listen: resolveListen(options.listen, transactionPooler, fail),
    queues,
    workerQueues,
    executorId,
    externalWorkflows: resolveExternalWorkflows(options.externalWorkflows, fail),
    pollIntervalMs:
      positiveIntegerOrUndefined(options.pollIntervalMs, 'pollIntervalMs', fail) ?? DEFAULT_POLL_INTERVAL_MS,
    shutdownGraceMs: nonNegativeInteger(options.shutdownGraceMs, 'shutdownGraceMs', fail) ?? DEFAULT_SHUTDOWN_GRACE_MS,
    leaseMs,
    heartbeatIntervalMs,
    maxRecoveryAttempts:
      nonNegativeInteger(options.maxRecoveryAttempts, 'maxRecoveryAttempts', fail) ?? DEFAULT_MAX_RECOVERY_ATTEMPTS,
    retentionMs:
      options.retentionMs === null
        ? null
        : (positiveIntegerOrUndefined(options.retentionMs, 'retentionMs', fail) ?? DEFAULT_RETENTION_MS),
  });
}

const FOR_ROOT_QUEUES = 'DedupQueueModule.forRoot({ queues })';

/**
 * The queues of `forRoot({ queues })` and of every `registerQueue()`, each declared exactly once (its limits in one
 * place), validated alike.
 */
function resolveQueues(
  rootQueues: QueueOptions[] | undefined,
  registrations: readonly QueueDeclarations[],
  fail: (message: string) => never,
): Map<string, ResolvedQueue> {
  if (rootQueues !== undefined && !Array.isArray(rootQueues)) {
    fail('`queues` must be an array of { name, concurrency?, workerConcurrency? }');
  }
  const declarations = [
    ...(rootQueues ?? []).map((queue) => ({ queue, declaredAt: FOR_ROOT_QUEUES })),
    ...registrations.flatMap(({ queues, declaredAt }) => queues.map((queue) => ({ queue, declaredAt }))),
  ];
  const queues = new Map<string, ResolvedQueue>();
  const declaredAt = new Map<string, string>();
  for (const { queue, declaredAt: place } of declarations) {
    const name = queue?.name;
    if (typeof name !== 'string' || name.length === 0 || exceedsCharacters(name, 100)) {
      fail(`queue name ${JSON.stringify(name)} (in ${place}) must be a string of 1 to 100 characters`);
    }
    if (name.includes(SHARD_SEPARATOR)) {
      fail(`queue name ${JSON.stringify(name)} (in ${place}) contains U+001F, which names a queue's shards`);
    }
    const earlier = declaredAt.get(name);
    if (earlier !== undefined) {
      fail(
        `queue "${name}" is declared twice, in ${earlier} and in ${place}; declare each queue once (a module ` +
          `that needs another module's queue imports that module, which exports its registerQueue())`,
      );
    }
    const prefix = place === FOR_ROOT_QUEUES ? `queues["${name}"].` : `registerQueue({ name: "${name}" }).`;
    const unknownQueueOption = unknownKey(queue, ['name', 'shards', ...QUEUE_LIMIT_KEYS]);
    if (unknownQueueOption) fail(`\`${prefix}${unknownQueueOption.key}\` ${unknownQueueOption.reason}`);
    const shards = resolveShards(queue, prefix, fail);
    queues.set(name, { ...resolveLimits(name, queue, prefix, fail), ...(shards > 1 && { shards }) });
    declaredAt.set(name, place);
  }
  return queues;
}

/**
 * A queue's declared shards (1 when left out), refused with a limit that would have to hold across all of them.
 */
function resolveShards(queue: QueueOptions, prefix: string, fail: (message: string) => never): number {
  const { shards } = queue;
  if (shards === undefined) return 1;
  if (!Number.isInteger(shards) || shards < 1 || shards > MAX_QUEUE_SHARDS) {
    fail(`\`${prefix}shards\` must be an integer from 1 to ${MAX_QUEUE_SHARDS}, got ${JSON.stringify(shards)}`);
  }
  const wide = shards > 1 && queueWideLimit(queue);
  if (wide) {
    fail(
      `\`${prefix}${wide}\` cannot hold across the ${shards} shards of queue "${queue.name}" (a queue with shards ` +
        `takes no limit across the whole queue: \`concurrency\`, \`partitionConcurrency\` or \`rateLimit\`); ` +
        'leave the limit out (`workerConcurrency` limits each process), or leave `shards` out',
    );
  }
  return shards;
}

/** The first limit of `limits` that holds across a whole queue (see `QUEUE_WIDE_LIMIT_KEYS`), if any. */
export function queueWideLimit(limits: QueueLimits): keyof QueueLimits | undefined {
  return QUEUE_WIDE_LIMIT_KEYS.find((key) => limits[key] !== undefined && limits[key] !== null);
}

function resolveExternalWorkflows(names: unknown, fail: (message: string) => never): ReadonlySet<string> {
  if (names === undefined) return new Set();
  if (!Array.isArray(names)) fail('`externalWorkflows` must be an array of workflow names');
  const external = new Set<string>();
  for (const name of names as unknown[]) {
    if (typeof name !== 'string' || name.length === 0 || exceedsCharacters(name, 255)) {
      fail(`\`externalWorkflows\` holds ${JSON.stringify(name)}; give workflow names of 1 to 255 characters`);
    }
    if (external.has(name)) fail(`\`externalWorkflows\` lists "${name}" twice`);
    external.add(name);
  }
  return external;
}

const ISOLATION_OPTION_KEYS = ['threads', 'resourceLimits', 'maxRunsPerThread', 'idleTimeoutMs', 'execArgv'];
const RESOURCE_LIMIT_KEYS = ['maxOldGenerationSizeMb', 'maxYoungGenerationSizeMb', 'codeRangeSizeMb', 'stackSizeMb'];

function resolveIsolation(
  isolation: DedupQueueModuleOptions['isolation'],
  fail: (message: string) => never,
): ResolvedIsolation {
  if (isolation === undefined) return { threads: availableParallelism(), idleTimeoutMs: DEFAULT_THREAD_IDLE_MS };
  if (isolation === null || typeof isolation !== 'object') {
    fail('`isolation` must be { threads?, resourceLimits?, maxRunsPerThread?, idleTimeoutMs?, execArgv? }');
  }
  const unknownOption = unknownKey(isolation, ISOLATION_OPTION_KEYS);
  if (unknownOption) fail(`\`isolation.${unknownOption.key}\` ${unknownOption.reason}`);
  const { resourceLimits, execArgv } = isolation;
  if (resourceLimits !== undefined) {
    if (resourceLimits === null || typeof resourceLimits !== 'object') {
      fail('`isolation.resourceLimits` must be { maxOldGenerationSizeMb?, maxYoungGenerationSizeMb?, ... }');
    }
    const unknownLimit = unknownKey(resourceLimits, RESOURCE_LIMIT_KEYS);
    if (unknownLimit) fail(`\`isolation.resourceLimits.${unknownLimit.key}\` ${unknownLimit.reason}`);
    for (const key of RESOURCE_LIMIT_KEYS) {
      positiveIntegerOrUndefined(
        resourceLimits[key as keyof IsolationResourceLimits],
        `isolation.resourceLimits.${key}`,
        fail,
      );
    }
  }
  if (execArgv !== undefined && !(Array.isArray(execArgv) && execArgv.every((arg) => typeof arg === 'string'))) {
    fail('`isolation.execArgv` must be an array of strings (Node options, e.g. ["--require", "ts-node/register"])');
  }
  return {
    threads: positiveIntegerOrUndefined(isolation.threads, 'isolation.threads', fail) ?? availableParallelism(),
    resourceLimits: resourceLimits && { ...resourceLimits },
    maxRunsPerThread: positiveIntegerOrUndefined(isolation.maxRunsPerThread, 'isolation.maxRunsPerThread', fail),
    idleTimeoutMs:
      positiveIntegerOrUndefined(isolation.idleTimeoutMs, 'isolation.idleTimeoutMs', fail) ?? DEFAULT_THREAD_IDLE_MS,
    execArgv: execArgv && [...execArgv],
  };
}

const NODE_ADDRESS = /^(.+):(\d{1,5})$/;

/** `citus.nodeAddresses`, each side a `host:port`; only with `distribution: 'citus'`. */
function resolveCitusNodeAddresses(
  options: DedupQueueModuleOptions,
  fail: (message: string) => never,
): ReadonlyMap<string, NodeAddress> {
  const citus = options.citus;
  if (citus === undefined) return new Map();
  const form = "`citus` must be { nodeAddresses: { 'name:port': 'host:port', ... } }";
  if (options.distribution !== 'citus') fail("`citus` needs `distribution: 'citus'`");
  if (!citus || typeof citus !== 'object' || Array.isArray(citus)) fail(form);
  const unknown = unknownKey(citus, ['nodeAddresses']);
  if (unknown) fail(`\`citus.${unknown.key}\` ${unknown.reason}`);
  const addresses = citus.nodeAddresses ?? {};
  if (!addresses || typeof addresses !== 'object' || Array.isArray(addresses)) fail(form);
  const resolved = new Map<string, NodeAddress>();
  for (const [node, address] of Object.entries(addresses)) {
    const from = parseNodeAddress(node);
    const to = typeof address === 'string' ? parseNodeAddress(address) : undefined;
    if (!from || !to) {
      fail(
        `\`citus.nodeAddresses\` maps ${JSON.stringify(node)} to ${JSON.stringify(address)}; both sides must be ` +
          "'host:port' with a port of 1 to 65535 (the key as pg_dist_node names the node)",
      );
    }
    resolved.set(`${from.host}:${from.port}`, to);
  }
  return resolved;
}

function parseNodeAddress(text: string): NodeAddress | undefined {
  const match = NODE_ADDRESS.exec(text);
  const port = Number(match?.[2]);
  if (!match || port < 1 || port > 65535) return undefined;
  return { host: match[1], port };
}

function resolveListen(
  listen: DedupQueueModuleOptions['listen'],
  transactionPooler: boolean,
  fail: (message: string) => never,
): DedupQueueConfig['listen'] {
  if (listen === false) return { mode: 'off', reason: '`listen: false`' };
  if (listen === undefined || listen === true) {
    return transactionPooler
      ? { mode: 'off', reason: "`pooler: 'transaction'` without `listen: { url }`" }
      : { mode: 'pooled' };
  }
  if (typeof listen !== 'object' || typeof listen.url !== 'string' || listen.url.length === 0) {
    fail('`listen` must be true, false or { url: a direct postgres:// URL to the server, past any pooler }');
  }
  assertPostgresUrl('listen.url', listen.url, fail);
  return { mode: 'direct', url: listen.url };
}

/** Bounds that keep a check's own recursion far from the stack's end, and a value within what Postgres stores. */
const INPUT_LIMIT_RANGES: Record<keyof InputLimits, readonly [number, number]> = {
  maxValueBytes: [1, 1024 * 1024 * 1024 - 1],
  maxDepth: [1, 1000],
  maxStreamValues: [1, 2 ** 31 - 1],
  maxStreamBytes: [1, Number.MAX_SAFE_INTEGER],
};

function resolveInputLimits(limits: InputLimits | undefined, fail: (message: string) => never): Required<InputLimits> {
  if (limits === undefined) return DEFAULT_INPUT_LIMITS;
  if (limits === null || typeof limits !== 'object')
    fail('`inputLimits` must be { maxValueBytes?, maxDepth?, maxStreamValues?, maxStreamBytes? }');
  const unknown = unknownKey(limits, Object.keys(INPUT_LIMIT_RANGES));
  if (unknown) fail(`\`inputLimits.${unknown.key}\` ${unknown.reason}`);
  const resolved = { ...DEFAULT_INPUT_LIMITS };
  for (const [name, [min, max]] of Object.entries(INPUT_LIMIT_RANGES) as Array<[keyof InputLimits, [number, number]]>) {
    const value = limits[name];
    if (value === undefined) continue;
    if (!Number.isInteger(value) || value < min || value > max) {
      fail(`\`inputLimits.${name}\` must be an integer from ${min} to ${max}`);
    }
    resolved[name] = value;
  }
  return resolved;
}

/**
 * Refuses a connection URL that is not a Postgres URL (see `postgresUrlProblem`) before any connection is tried,
 * saying what is wrong, with the URL's password masked.
 */
function assertPostgresUrl(field: string, url: unknown, fail: (message: string) => never): void {
  if (url === undefined || url === null || url === '') return;
  if (typeof url !== 'string') fail(`\`${field}\` must be a string, got ${typeof url}`);
  const problem = postgresUrlProblem(url);
  if (problem) fail(`\`${field}\` ${problem}; got "${maskedUrl(url)}"`);
}

/** Validates a queue's limits (declared, or changed at run time) and applies the defaults. */
export function resolveLimits(
  name: string,
  limits: QueueLimits,
  prefix: string,
  fail: (message: string) => never,
): ResolvedQueue {
  const concurrency = positiveIntegerOrUndefined(limits.concurrency, `${prefix}concurrency`, fail);
  const workerConcurrency =
    positiveIntegerOrUndefined(limits.workerConcurrency, `${prefix}workerConcurrency`, fail) ??
    Math.min(concurrency ?? DEFAULT_WORKER_CONCURRENCY, DEFAULT_WORKER_CONCURRENCY);
  const partitionConcurrency = positiveIntegerOrUndefined(
    limits.partitionConcurrency,
    `${prefix}partitionConcurrency`,
    fail,
  );
  const rateLimit = limits.rateLimit;
  if (rateLimit !== undefined) {
    if (rateLimit === null || typeof rateLimit !== 'object') fail(`\`${prefix}rateLimit\` must be { limit, periodMs }`);
    const unknownRateOption = unknownKey(rateLimit, ['limit', 'periodMs', 'perPartition']);
    if (unknownRateOption) fail(`\`${prefix}rateLimit.${unknownRateOption.key}\` ${unknownRateOption.reason}`);
    positiveIntegerOrUndefined(rateLimit.limit ?? 0, `${prefix}rateLimit.limit`, fail);
    positiveIntegerOrUndefined(rateLimit.periodMs ?? 0, `${prefix}rateLimit.periodMs`, fail);
  }
  return { name, concurrency, workerConcurrency, partitionConcurrency, rateLimit };
}

/**
 * Whether a queue has limits that hold across processes (concurrency, partitions, a rate limit): its claims are
 * serialised on the queue's row and can come back short for lack of a slot rather than of work.
 */
export function hasGlobalLimits(queue: ResolvedQueue): boolean {
  return queue.concurrency !== undefined || isPartitioned(queue) || queue.rateLimit !== undefined;
}

/** Whether a queue is served partition by partition (round-robin, with per-key limits). */
export function isPartitioned(queue: ResolvedQueue): boolean {
  return queue.partitionConcurrency !== undefined || queue.rateLimit?.perPartition === true;
}

function positiveIntegerOrUndefined(
  value: unknown,
  name: string,
  fail: (message: string) => never,
): number | undefined {
  if (value === undefined) return undefined;
  if (!Number.isInteger(value) || (value as number) < 1) fail(`\`${name}\` must be a positive integer`);
  return value as number;
}

function nonNegativeInteger(value: unknown, name: string, fail: (message: string) => never): number | undefined {
  if (value === undefined) return undefined;
  if (!Number.isInteger(value) || (value as number) < 0) fail(`\`${name}\` must be a non-negative integer`);
  return value as number;
}

/** @throws UnknownQueueError when no module declared `queueName`, naming the declared ones. */
export function assertQueueDeclared(config: DedupQueueConfig, queueName: string): void {
  if (!config.queues.has(queueName)) throw new UnknownQueueError(queueName, [...config.queues.keys()]);
}
