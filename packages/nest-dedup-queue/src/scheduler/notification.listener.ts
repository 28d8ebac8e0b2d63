import { Logger } from '@nestjs/common';
import type { Notification } from 'pg';
import type { DedicatedConnection, QueueDatabase } from '../database/queue-database';

const RECONNECT_DELAY_MS = 1000;

/** What to do with the payloads of one channel; called with undefined after a reconnect (payloads may be lost). */
export type ChannelHandler = (payload: string | undefined) => void;

/**
 * Holds one connection that LISTENs on the module's channels (wake-ups, cancellations) and hands each
 * notification to its channel's handler. Reconnects after a connection loss and then calls every handler with
 * undefined, since notifications sent meanwhile are lost; polling covers the gap until then.
 */
export class NotificationListener {
  private readonly logger = new Logger('DedupQueueScheduler');
  private connection?: DedicatedConnection;
  private reconnectTimer?: NodeJS.Timeout;
  private stopped = false;

  constructor(
    private readonly database: QueueDatabase,
    private readonly handlers: ReadonlyMap<string, ChannelHandler>,
  ) {}

  /** Starts listening; a failure is logged and retried in the background, never thrown. */
  async start(): Promise<void> {
    this.stopped = false;
    await this.connect();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    const connection = this.connection;
    this.connection = undefined;
    if (connection) {
      await connection.client.query('UNLISTEN *').then(
        () => connection.release(),
        (error: Error) => connection.release(error),
      );
    }
  }

  private async connect(): Promise<boolean> {
    let connection: DedicatedConnection;
    try {
      connection = await this.database.connect();
    } catch (error) {
      this.lost(error as Error);
      return false;
    }
    const onNotification = (message: Notification) => this.handlers.get(message.channel)?.(message.payload);
    const onError = (error: Error) => {
      connection.client.off('notification', onNotification);
      connection.client.off('error', onError);
      connection.release(error);
      if (this.connection === connection) this.connection = undefined;
      this.lost(error);
    };
    connection.client.on('notification', onNotification);
    connection.client.on('error', onError);
    try {
      for (const channel of this.handlers.keys()) {
        await connection.client.query(`LISTEN "${channel}"`);
      }
    } catch (error) {
      onError(error as Error);
      return false;
    }
    this.connection = connection;
    return true;
  }

  private lost(error: Error): void {
    if (this.stopped) return;
    this.logger.warn(`Wake-up connection unavailable (${error.message}); polling until it is back`);
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(() => {
      void this.connect().then((listening) => listening && this.handlers.forEach((handle) => handle(undefined)));
    }, RECONNECT_DELAY_MS);
    this.reconnectTimer.unref();
  }
}
