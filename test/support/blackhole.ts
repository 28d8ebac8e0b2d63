import { createServer, Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/** A TCP listener that accepts connections and never sends a byte. */
export interface Blackhole {
  readonly port: number;
  /** `postgres://postgres@127.0.0.1:<port>/postgres`: a database URL whose server never answers. */
  readonly url: string;
  /** How many connections it has accepted so far. */
  readonly accepted: number;
  /** Closes the listener and every connection it holds. */
  close(): Promise<void>;
}

/** Listens on a free loopback port; for "boot against a server that accepts TCP and never answers". */
export async function startBlackhole(): Promise<Blackhole> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server = createServer((socket) => {
    accepted += 1;
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: 0 }, resolve);
  });
  const { port } = server.address() as AddressInfo;
  return {
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    get accepted() {
      return accepted;
    },
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
