import type { Logger } from '@nestjs/common';
import { DatabaseUnavailableError } from '../errors/database-unavailable.error';
import { describeError } from './describe-error';

/**
 * Logs a run of failures of one recurring task (claiming, renewing a lease, writing outcomes) without flooding:
 * the first failure, then every `every`-th in a row. Connection failures are not logged here: the connection
 * monitor tells an outage once.
 */
export class FailureLog {
  private inARow = 0;

  constructor(
    private readonly logger: Logger,
    private readonly every = 20,
  ) {}

  failed(what: string, error: unknown): void {
    if (error instanceof DatabaseUnavailableError) return;
    this.inARow += 1;
    if (this.inARow === 1 || this.inARow % this.every === 0) {
      const times = this.inARow > 1 ? ` (${this.inARow} times in a row)` : '';
      this.logger.warn(`${what} failed${times}: ${describeError(error)}`);
    }
  }

  succeeded(): void {
    this.inARow = 0;
  }
}
