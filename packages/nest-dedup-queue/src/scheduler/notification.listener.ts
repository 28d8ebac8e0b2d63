import { Injectable } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { DedupQueueConfig } from '../dedup-queue.config';
import { ConnectionMonitor } from '../database/connection/connection-monitor';
import { type DedicatedConnection, type PgNotification, QueueDatabase } from '../database/connection/queue-database';
import { backoffDelayMs } from '../utils/backoff';
import { CitusNodeListeners } from './citus-node-listeners';
import { ModuleLogger } from '../utils/module-logger';

/** What to do with the payloads of one channel; called with undefined after a reconnect (payloads may be lost). */
export type ChannelHandler = (payload: string | undefined) => void;

const RECONNECT_BACKOFF = { initialDelayMs: 250, maxDelayMs: 5000 };
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
  private readonly monitor: ConnectionMonitor;
  private readonly selfTestChannel = `dq_self_test_${randomBytes(8).toString('hex')}`;
  private connection?: DedicatedConnection;
  private detach?: () => void;
  private reconnectTimer?: NodeJS.Timeout;
  private failedConnects = 0;
  private stopped = false;
  private disabled = false;
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
    this.monitor = new ConnectionMonitor(this.logger, {
      lost: (reason) =>
        `Wake-ups: the LISTEN connection is lost (${reason}); workers poll every ${config.pollIntervalMs} ms until it is back`,
      back: (seconds) => `Wake-ups: LISTEN re-established after ${seconds} s`,
    });
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
    return this.connection !== undefined && (this.nodes?.listening ?? true);
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
      await Promise.all([this.listenOnConnection(added), this.nodes?.listenOn(added)]);
      return;
    }
    this.running = true;
    this.stopped = false;
    const listen = this.config.listen;
    if (listen.mode === 'off') {
      this.disable(`${listen.reason}`);
      return;
    }
    const [connected] = await Promise.all([this.connect(), this.nodes?.start()]);
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

  /** A LISTEN on the held connection for channels added after it connected (a reconnect LISTENs on every channel). */
  private async listenOnConnection(channels: string[]): Promise<void> {
    const connection = this.connection;
    if (!connection) return;
    try {
      for (const channel of channels) await connection.client.query(`LISTEN "${channel}"`);
    } catch {
      // NOTE: the connection broke: its 'error' or 'end' listener reconnects, and LISTENs on every channel again.
    }
  }

  async stop(): Promise<void> {
    this.running = false;
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    const connection = this.connection;
    this.drop();
    await this.nodes?.stop();
    if (connection) {
      await connection.client.query('UNLISTEN *').then(
        () => connection.release(),
        (error: Error) => connection.release(error),
      );
    }
  }

  private async connect(): Promise<boolean> {
    const listen = this.config.listen;
    let connection: DedicatedConnection | undefined;
    try {
      connection =
        listen.mode === 'direct' ? await this.database.connectOutsidePool(listen.url) : await this.database.connect();
      const [{ standby }] = (
        await connection.client.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby')
      ).rows;
      if (standby) throw new Error('the server is a standby (in recovery); waiting for a primary');
      this.attach(connection);
      for (const channel of [...this.handlers.keys(), this.selfTestChannel]) {
        await connection.client.query(`LISTEN "${channel}"`);
      }
    } catch (error) {
      if (connection) {
        if (this.connection === connection) this.drop();
        connection.release(error as Error);
      }
      this.lost(error);
      return false;
    }
    if (this.stopped) {
      this.drop();
      connection.release();
      return false;
    }
    this.failedConnects = 0;
    this.monitor.succeeded();
    return true;
  }

  /** NOTE: the connection keeps the 'error' listener its source gave it until released, so nothing goes unhandled. */
  private attach(connection: DedicatedConnection): void {
    const onNotification = (message: PgNotification) => {
      if (message.channel === this.selfTestChannel) this.selfTestArrived?.();
      else this.handlers.get(message.channel)?.(message.payload);
    };
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
    if (this.stopped || this.disabled) return;
    this.monitor.failed(error);
    this.failedConnects += 1;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(
      () => {
        void this.connect().then((listening) => listening && this.handlers.forEach((handle) => handle(undefined)));
      },
      backoffDelayMs(this.failedConnects, RECONNECT_BACKOFF),
    );
    this.reconnectTimer.unref();
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
    if (!ok && !this.stopped && this.connection) {
      this.disable(
        `a NOTIFY sent through the pool did not arrive on the LISTEN connection within ${SELF_TEST_TIMEOUT_MS} ms ` +
          `(a transaction pooler in between?); give \`listen: { url }\` a direct connection to the server`,
      );
    }
  }

  private disable(reason: string): void {
    this.disabled = true;
    clearTimeout(this.reconnectTimer);
    void this.nodes?.stop();
    const connection = this.connection;
    this.drop();
    connection?.release();
    this.logger.warn(
      `Wake-ups by LISTEN/NOTIFY are off: ${reason}. Workers poll every ${this.config.pollIntervalMs} ms, so new ` +
        `work starts within about that long instead of within milliseconds`,
    );
    // NOTE: those waiting for a notification since the connection was made look once more, then poll.
    if (connection) this.handlers.forEach((handle) => handle(undefined));
  }
}
