import type { DedupQueueConfig, NodeAddress } from '../dedup-queue.config';
import { ConnectionMonitor } from '../database/connection/connection-monitor';
import type { PgNotification, QueueDatabase } from '../database/connection/queue-database';
import type { ModuleLogger } from '../utils/module-logger';
import { ListeningConnection } from './listening-connection';

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
 * once (`ListeningConnection`). `citus.nodeAddresses` maps a node's name to the address this process reaches it at.
 */
export class CitusNodeListeners {
  private readonly nodes = new Map<string, ListeningConnection>();
  private readonly listMonitor: ConnectionMonitor;
  private refreshTimer?: NodeJS.Timeout;
  private refreshing?: Promise<void>;
  private listRead = false;
  private stopped = true;
  /** After the first read: a node (re)connected later may have missed hints. */
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
    this.refreshTimer = setInterval(() => void this.refresh(), this.config.heartbeatIntervalMs);
    this.refreshTimer.unref();
  }

  /** LISTENs on channels added after the nodes' connections were made. */
  async listenOn(channels: string[]): Promise<void> {
    await Promise.all([...this.nodes.values()].map((node) => node.listenOn(channels)));
  }

  /** Stops reading the node list and UNLISTENs on every node. */
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
    const added: ListeningConnection[] = [];
    for (const [name, address] of addresses) {
      if (this.nodes.has(name)) continue;
      const node = this.nodeListener(name, address);
      this.nodes.set(name, node);
      added.push(node);
    }
    await Promise.all(
      added.map(async (node) => {
        if (await node.connect()) this.nodeConnected();
      }),
    );
    this.listRead = true;
  }

  /** The LISTEN connection on one node, reconnected with backoff until stopped. */
  private nodeListener(name: string, address: NodeAddress): ListeningConnection {
    const reachedAt = `${address.host}:${address.port}` === name ? '' : ` (reached at ${address.host}:${address.port})`;
    const listen = this.config.listen;
    return new ListeningConnection(this.logger, {
      open: () => this.database.connectToNode(address, listen.mode === 'direct' ? listen.url : undefined),
      channels: () => this.owner.channels(),
      notified: (message) => this.owner.notified(message),
      messages: {
        lost: (reason) =>
          `Wake-ups: the LISTEN connection to Citus node ${name}${reachedAt} is lost (${reason}); what is sent ` +
          `through that node is heard at the next poll (every ${this.config.pollIntervalMs} ms) until it is back`,
        back: (seconds) => `Wake-ups: LISTEN on Citus node ${name} re-established after ${seconds} s`,
      },
      lost: () => void this.refresh(),
      reconnected: () => this.nodeConnected(),
    });
  }

  /** A node's connection is in place: once the listeners started, what was sent through it before was not heard. */
  private nodeConnected(): void {
    if (this.running) this.owner.mayHaveMissed();
  }

  private addressOf(name: string, port: number): NodeAddress {
    return this.config.citusNodeAddresses.get(`${name}:${port}`) ?? { host: name, port };
  }
}
