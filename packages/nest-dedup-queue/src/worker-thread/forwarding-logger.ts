import type { LoggerService } from '@nestjs/common';
import type { FromThread, LogLevelName } from '../isolation/thread-messages';

/**
 * The contexts of Nest's own lines while a thread builds its providers, which the application needs not see (a
 * failure to build is reported with the error it throws).
 */
const NEST_BOOT_CONTEXTS = new Set(['NestFactory', 'InstanceLoader', 'ExceptionHandler']);

/**
 * The logger of a worker thread (Nest's `Logger` in the thread writes through it): each line goes to the main
 * thread, which writes it with the application's logger, as a line of the main thread would be.
 */
export class ForwardingLogger implements LoggerService {
  constructor(private readonly post: (message: FromThread) => void) {}

  log(message: unknown, ...params: unknown[]): void {
    this.forward('log', message, params);
  }

  error(message: unknown, ...params: unknown[]): void {
    this.forward('error', message, params);
  }

  warn(message: unknown, ...params: unknown[]): void {
    this.forward('warn', message, params);
  }

  debug(message: unknown, ...params: unknown[]): void {
    this.forward('debug', message, params);
  }

  verbose(message: unknown, ...params: unknown[]): void {
    this.forward('verbose', message, params);
  }

  fatal(message: unknown, ...params: unknown[]): void {
    this.forward('fatal', message, params);
  }

  private forward(level: LogLevelName, message: unknown, params: unknown[]): void {
    if (NEST_BOOT_CONTEXTS.has(params.at(-1) as string)) return;
    try {
      this.post({ kind: 'log', level, message, params });
    } catch {
      // NOTE: what the structured clone cannot copy (a function, a class's instance with one) is logged as text.
      this.post({ kind: 'log', level, message: String(message), params: params.map(String) });
    }
  }
}
