import { Injectable } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { DedupQueueConfig } from '../dedup-queue.config';
import { type DedicatedConnection, type PgNotification, QueueDatabase } from '../database/connection/queue-database';
import { CitusNodeListeners } from './citus-node-listeners';
import { ListeningConnection } from './listening-connection';
import { ModuleLogger } from '../utils/module-logger';

/** What to do with the payloads of one channel; called with undefined after a reconnect (payloads may be lost). */
export type ChannelHandler = (payload: string | undefined) => void;

const SELF_TEST_TIMEOUT_MS = 3000;

/**
 * Holds one connection that LISTENs on the module's channels (wake-ups, cancellations, control) and hands each
 * notification to its channel's handler. The connection is a pooled one, or one of its own to `listen.url`
 * (straight to the server, past a transaction pooler). It never LISTENs on a standby ("cannot execute LISTEN during
 * recovery"): after a failover it reconnects until it reaches a primary, then calls every handler with undefined,
 * since notifications sent meanwhile are lost; polling covers the gap. At start a NOTIFY sent through the pool
 * must come back on this connection within 3 s, or wake-ups are switched off (a pooler in between) and workers poll.
 * On Citus it also LISTENs on every other node of the cluster (`CitusNodeListeners`), where hints sent through those
 * nodes arrive.
 */
@Injectable()
export class NotificationListener {
  private readonly logger = new ModuleLogger('DedupQueueScheduler');
  private readonly selfTestChannel = `dq_self_test_${randomBytes(8).toString('hex')}`;
  /** The LISTEN connection of the current run (from `start` to `stop`). */
  private connection?: ListeningConnection;
  private selfTestArrived?: () => void;
  private readonly handlers = new Map<string, ChannelHandler>();
  /** On Citus: the LISTEN connections on the cluster's other nodes. */
  private readonly nodes?: CitusNodeListeners;
  /** Between `start` (or the first `listenTo`) and `stop`. */
  private running = false;

  constructor(
    private readonly database: QueueDatabase,
    private readonly config: DedupQueueConfig,
  ) {
    if (config.distribution === 'citus') {
      this.nodes = new CitusNodeListeners(database, config, this.logger, {
        channels: () => [...this.handlers.keys()],
        notified: (message) => this.handlers.get(message.channel)?.(message.payload),
        mayHaveMissed: () => this.handlers.forEach((handle) => handle(undefined)),
      });
    }
  }

  /**
   * Whether notifications arrive now (on Citus, from every node); while not, workers rely on polling (and check
   * their running workflows).
   */
  get listening(): boolean {
    return (this.connection?.listening ?? false) && (this.nodes?.listening ?? true);
  }

  /**
   * Starts listening on the channels of `handlers`; resolves once LISTEN is in place (or failed: logged and retried
   * in the background, never thrown). The self-test runs on in the background, so that workers start claiming
   * without waiting for it.
   */
  async start(handlers: ReadonlyMap<string, ChannelHandler>): Promise<void> {
    const added = [...handlers.keys()].filter((channel) => !this.handlers.has(channel));
    handlers.forEach((handle, channel) => this.handlers.set(channel, handle));
    if (this.running) {
      await Promise.all([this.connection?.listenOn(added), this.nodes?.listenOn(added)]);
      return;
    }
    this.running = true;
    const listen = this.config.listen;
    if (listen.mode === 'off') {
      this.disable(`${listen.reason}`);
      return;
    }
    this.connection = this.listeningConnection();
    const [connected] = await Promise.all([this.connection.connect(), this.nodes?.start()]);
    if (connected) void this.selfTest();
  }

  /**
   * Listens on one more channel: on the connection the module holds, or, in a process that holds none yet (one
   * that runs no workers), on one opened now, as `start` does. Resolves once LISTEN is in place or failed (retried
   * in the background, never thrown).
   */
  async listenTo(channel: string, handler: ChannelHandler): Promise<void> {
    await this.start(new Map([[channel, handler]]));
  }

  /** Stops listening (here and on the other Citus nodes): UNLISTENs and releases the connections. */
  async stop(): Promise<void> {
    this.running = false;
    await Promise.all([this.connection?.stop(), this.nodes?.stop()]);
  }

  /**
   * A connection that LISTENs on every channel and the self-test's: a pooled one, or one of its own to `listen.url`;
   * never one to a standby. After a reconnect every handler is called with undefined (payloads may be lost).
   */
  private listeningConnection(): ListeningConnection {
    const listen = this.config.listen;
    return new ListeningConnection(this.logger, {
      open: () => (listen.mode === 'direct' ? this.database.connectOutsidePool(listen.url) : this.database.connect()),
      vet: async (connection) => {
        if (await isStandby(connection))
          throw new Error('the server is a standby (in recovery); waiting for a primary');
      },
      channels: () => [...this.handlers.keys(), this.selfTestChannel],
      notified: (message) => this.notified(message),
      messages: {
        lost: (reason) =>
          `Wake-ups: the LISTEN connection is lost (${reason}); workers poll every ${this.config.pollIntervalMs} ms ` +
          `until it is back`,
        back: (seconds) => `Wake-ups: LISTEN re-established after ${seconds} s`,
      },
      reconnected: () => this.handlers.forEach((handle) => handle(undefined)),
    });
  }

  private notified(message: PgNotification): void {
    if (message.channel === this.selfTestChannel) this.selfTestArrived?.();
    else this.handlers.get(message.channel)?.(message.payload);
  }

  /** Sends a NOTIFY the way enqueues do (through the pool) and waits for it here. */
  private async selfTest(): Promise<void> {
    const arrived = new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), SELF_TEST_TIMEOUT_MS);
      this.selfTestArrived = () => {
        clearTimeout(timer);
        resolve(true);
      };
    });
    try {
      await this.database.query('SELECT pg_notify($1, $2)', [this.selfTestChannel, 'self-test']);
    } catch {
      return;
    }
    const ok = await arrived;
    this.selfTestArrived = undefined;
    if (!ok && this.running && this.connection?.listening) {
      this.disable(
        `a NOTIFY sent through the pool did not arrive on the LISTEN connection within ${SELF_TEST_TIMEOUT_MS} ms ` +
          `(a transaction pooler in between?); give \`listen: { url }\` a direct connection to the server`,
      );
    }
  }

  private disable(reason: string): void {
    const wasListening = this.connection?.listening ?? false;
    void this.connection?.stop();
    void this.nodes?.stop();
    this.logger.warn(
      `Wake-ups by LISTEN/NOTIFY are off: ${reason}. Workers poll every ${this.config.pollIntervalMs} ms, so new ` +
        `work starts within about that long instead of within milliseconds`,
    );
    // NOTE: those waiting for a notification since the connection was made look once more, then poll.
    if (wasListening) this.handlers.forEach((handle) => handle(undefined));
  }
}

async function isStandby(connection: DedicatedConnection): Promise<boolean> {
  const { rows } = await connection.client.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby');
  return rows[0].standby;
}
