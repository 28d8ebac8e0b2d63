import type { DedupQueueConfig, NodeAddress } from '../dedup-queue.config';
import { ConnectionMonitor } from '../database/connection/connection-monitor';
import type { DedicatedConnection, PgNotification, QueueDatabase } from '../database/connection/queue-database';
import { backoffDelayMs } from '../utils/backoff';
import type { ModuleLogger } from '../utils/module-logger';

const RECONNECT_BACKOFF = { initialDelayMs: 250, maxDelayMs: 5000 };

/** The other nodes of the cluster, seen from the node this process connects to: active primaries and the coordinator. */
const OTHER_NODES_SQL = `
  SELECT nodename AS name, nodeport AS port FROM pg_catalog.pg_dist_node
  WHERE isactive AND noderole = 'primary' AND groupid <> (SELECT groupid FROM pg_catalog.pg_dist_local_group)
  ORDER BY groupid`;

/** What the node listeners need of the module's listener. */
export interface NodeListenersOwner {
  /** The channels to LISTEN on. */
  channels(): string[];
  notified(message: PgNotification): void;
  /** A node's listener (re)connected after the start: what was sent through it meanwhile was not heard. */
  mayHaveMissed(): void;
}

/**
 * On Citus, a NOTIFY is heard only on the node it was sent through: this holds one LISTEN connection on each other
 * node of the cluster (the module's own listener covers the node this process connects to). The node list is read
 * from `pg_dist_node` at start, on every heartbeat interval and when a node's connection fails; a node added is
 * listened on, a node removed dropped. Each node's connection reconnects with backoff and logs each change of state
 * once (`ConnectionMonitor`). `citus.nodeAddresses` maps a node's name to the address this process reaches it at.
 */
export class CitusNodeListeners {
  private readonly nodes = new Map<string, NodeListener>();
  private readonly listMonitor: ConnectionMonitor;
  private refreshTimer?: NodeJS.Timeout;
  private refreshing?: Promise<void>;
  private listRead = false;
  private stopped = true;
  /** After the first read: a node listened on later may have missed hints. */
  private running = false;

  constructor(
    private readonly database: QueueDatabase,
    private readonly config: DedupQueueConfig,
    private readonly logger: ModuleLogger,
    private readonly owner: NodeListenersOwner,
  ) {
    this.listMonitor = new ConnectionMonitor(logger, {
      lost: (reason) =>
        `Wake-ups: the Citus node list cannot be read (${reason}); what is sent through other nodes is heard at ` +
        `the next poll (every ${config.pollIntervalMs} ms) until it is read`,
      back: (seconds) => `Wake-ups: the Citus node list is read again after ${seconds} s`,
    });
  }

  /** Whether every other node's LISTEN connection is in place (so every hint of the cluster arrives). */
  get listening(): boolean {
    return this.listRead && [...this.nodes.values()].every((node) => node.listening);
  }

  /** Reads the node list and listens on each node; resolves once each connected or failed (retried in the background). */
  async start(): Promise<void> {
    this.stopped = false;
    this.running = false;
    await this.refresh();
    this.running = true;
    for (const node of this.nodes.values()) node.started = true;
    this.refreshTimer = setInterval(() => void this.refresh(), this.config.heartbeatIntervalMs);
    this.refreshTimer.unref();
  }

  /** LISTENs on channels added after the nodes' connections were made. */
  async listenOn(channels: string[]): Promise<void> {
    await Promise.all([...this.nodes.values()].map((node) => node.listenOn(channels)));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.listRead = false;
    clearInterval(this.refreshTimer);
    const nodes = [...this.nodes.values()];
    this.nodes.clear();
    await Promise.all(nodes.map((node) => node.stop()));
  }

  /** Reads the node list again (once at a time): listens on the nodes added, drops the nodes removed. */
  refresh(): Promise<void> {
    this.refreshing ??= this.readNodes().finally(() => (this.refreshing = undefined));
    return this.refreshing;
  }

  private async readNodes(): Promise<void> {
    let rows: { name: string; port: number }[];
    try {
      rows = await this.database.query<{ name: string; port: number }>(OTHER_NODES_SQL, [], { idempotent: true });
    } catch (error) {
      if (!this.stopped) this.listMonitor.failed(error);
      return;
    }
    this.listMonitor.succeeded();
    if (this.stopped) return;
    const addresses = new Map(rows.map(({ name, port }) => [`${name}:${port}`, this.addressOf(name, Number(port))]));
    for (const [name, node] of this.nodes) {
      if (addresses.has(name)) continue;
      this.nodes.delete(name);
      this.logger.log(`Wake-ups: Citus node ${name} left the cluster (pg_dist_node); no longer listening on it`);
      void node.stop();
    }
    const added: NodeListener[] = [];
    for (const [name, address] of addresses) {
      if (this.nodes.has(name)) continue;
      const node = new NodeListener(
        name,
        address,
        this.database,
        this.config,
        this.logger,
        this.owner,
        () => void this.refresh(),
      );
      node.started = this.running;
      this.nodes.set(name, node);
      added.push(node);
    }
    await Promise.all(added.map((node) => node.connect()));
    this.listRead = true;
  }

  private addressOf(name: string, port: number): NodeAddress {
    return this.config.citusNodeAddresses.get(`${name}:${port}`) ?? { host: name, port };
  }
}

/** The LISTEN connection on one node, reconnected with backoff until stopped. */
class NodeListener {
  private readonly monitor: ConnectionMonitor;
  private connection?: DedicatedConnection;
  private detach?: () => void;
  private reconnectTimer?: NodeJS.Timeout;
  private failedConnects = 0;
  private stopped = false;
  /** Set once the module's listener started: a later connect may have missed hints. */
  started = false;

  constructor(
    private readonly name: string,
    private readonly address: NodeAddress,
    private readonly database: QueueDatabase,
    private readonly config: DedupQueueConfig,
    logger: ModuleLogger,
    private readonly owner: NodeListenersOwner,
    private readonly failed: () => void,
  ) {
    const reachedAt = `${address.host}:${address.port}` === name ? '' : ` (reached at ${address.host}:${address.port})`;
    this.monitor = new ConnectionMonitor(logger, {
      lost: (reason) =>
        `Wake-ups: the LISTEN connection to Citus node ${name}${reachedAt} is lost (${reason}); what is sent ` +
        `through that node is heard at the next poll (every ${config.pollIntervalMs} ms) until it is back`,
      back: (seconds) => `Wake-ups: LISTEN on Citus node ${name} re-established after ${seconds} s`,
    });
  }

  get listening(): boolean {
    return this.connection !== undefined;
  }

  async connect(): Promise<void> {
    let connection: DedicatedConnection | undefined;
    try {
      connection = await this.database.connectToNode(
        this.address,
        this.config.listen.mode === 'direct' ? this.config.listen.url : undefined,
      );
      this.attach(connection);
      for (const channel of this.owner.channels()) await connection.client.query(`LISTEN "${channel}"`);
    } catch (error) {
      if (connection) {
        if (this.connection === connection) this.drop();
        connection.release(error as Error);
      }
      this.lost(error);
      return;
    }
    if (this.stopped) {
      this.drop();
      connection.release();
      return;
    }
    this.failedConnects = 0;
    this.monitor.succeeded();
    if (this.started) this.owner.mayHaveMissed();
  }

  async listenOn(channels: string[]): Promise<void> {
    const connection = this.connection;
    if (!connection) return;
    try {
      for (const channel of channels) await connection.client.query(`LISTEN "${channel}"`);
    } catch {
      // NOTE: the connection broke: its 'error' or 'end' listener reconnects, and LISTENs on every channel again.
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    const connection = this.connection;
    this.drop();
    if (connection) {
      await connection.client.query('UNLISTEN *').then(
        () => connection.release(),
        (error: Error) => connection.release(error),
      );
    }
  }

  private attach(connection: DedicatedConnection): void {
    const onNotification = (message: PgNotification) => this.owner.notified(message);
    const onBroken = (error?: Error) => {
      if (this.connection !== connection) return;
      this.drop();
      connection.release(error ?? new Error('the LISTEN connection ended'));
      this.lost(error ?? new Error('connection ended'));
    };
    const onEnd = () => onBroken();
    connection.client.on('notification', onNotification);
    connection.client.on('error', onBroken);
    connection.client.on('end', onEnd);
    this.connection = connection;
    this.detach = () => {
      connection.client.off('notification', onNotification);
      connection.client.off('end', onEnd);
      connection.client.off('error', onBroken);
    };
  }

  private drop(): void {
    this.detach?.();
    this.detach = undefined;
    this.connection = undefined;
  }

  private lost(error: unknown): void {
    if (this.stopped) return;
    this.monitor.failed(error);
    this.failedConnects += 1;
    this.failed();
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(() => void this.connect(), backoffDelayMs(this.failedConnects, RECONNECT_BACKOFF));
    this.reconnectTimer.unref();
  }
}
