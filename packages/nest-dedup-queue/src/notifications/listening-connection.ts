import { ConnectionMonitor, type OutageMessages } from '../database/connection/connection-monitor';
import type { DedicatedConnection, PgNotification } from '../database/connection/queue-database';
import { backoffDelayMs } from '../utils/backoff';
import type { ModuleLogger } from '../utils/module-logger';

const RECONNECT_BACKOFF = { initialDelayMs: 250, maxDelayMs: 5000 };

/** Where a listening connection connects to, what it LISTENs on, and whom it tells. */
export interface ListeningConnectionOptions {
  /** Opens a new connection to LISTEN on. */
  open(): Promise<DedicatedConnection>;
  /** Throws if the connection opened must not be listened on (a standby, say): it is released and retried. */
  vet?(connection: DedicatedConnection): Promise<void>;
  /** The channels to LISTEN on, read at each connect. */
  channels(): string[];
  notified(message: PgNotification): void;
  /** The lines a loss and a recovery are logged with (once per change of state). */
  messages: OutageMessages;
  /** Told of each loss, before the reconnect is scheduled. */
  lost?(): void;
  /** Told once a reconnect after a loss has LISTEN in place: what was sent meanwhile was not heard. */
  reconnected?(): void;
}

/**
 * One connection that LISTENs on a set of channels and hands each notification on. When it breaks (its 'error' or
 * 'end' event, or a failed connect or LISTEN) it is dropped and released, the loss is logged once
 * (`ConnectionMonitor`), and it reconnects with backoff (from 250 ms, doubling, up to 5 s) until it is back or
 * stopped; a reconnect LISTENs on every channel again. A stopped one stays stopped.
 */
export class ListeningConnection {
  private readonly monitor: ConnectionMonitor;
  private connection?: DedicatedConnection;
  private detach?: () => void;
  private reconnectTimer?: NodeJS.Timeout;
  private failedConnects = 0;
  private stopped = false;

  constructor(
    logger: ModuleLogger,
    private readonly options: ListeningConnectionOptions,
  ) {
    this.monitor = new ConnectionMonitor(logger, options.messages);
  }

  /** Whether LISTEN is in place now. */
  get listening(): boolean {
    return this.connection !== undefined;
  }

  /**
   * Connects and LISTENs on every channel. Resolves true once in place; false if it failed (logged, and retried in
   * the background) or was stopped meanwhile. Never throws.
   */
  async connect(): Promise<boolean> {
    let connection: DedicatedConnection | undefined;
    try {
      connection = await this.options.open();
      await this.options.vet?.(connection);
      this.attach(connection);
      for (const channel of this.options.channels()) await connection.client.query(`LISTEN "${channel}"`);
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

  /** LISTENs on channels added after it connected (a reconnect LISTENs on every channel). */
  async listenOn(channels: string[]): Promise<void> {
    const connection = this.connection;
    if (!connection) return;
    try {
      for (const channel of channels) await connection.client.query(`LISTEN "${channel}"`);
    } catch {
      // NOTE: the connection broke: its 'error' or 'end' listener reconnects, and LISTENs on every channel again.
    }
  }

  /** Stops reconnecting, stops handing notifications on at once, then UNLISTENs and releases the connection. */
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

  /** NOTE: the connection keeps the 'error' listener its source gave it until released, so nothing goes unhandled. */
  private attach(connection: DedicatedConnection): void {
    const onNotification = (message: PgNotification) => this.options.notified(message);
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
    this.options.lost?.();
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(
      () => void this.connect().then((listening) => listening && this.options.reconnected?.()),
      backoffDelayMs(this.failedConnects, RECONNECT_BACKOFF),
    );
    this.reconnectTimer.unref();
  }
}
