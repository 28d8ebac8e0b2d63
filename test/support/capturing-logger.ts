import { ConsoleLogger } from '@nestjs/common';

/** Keeps what the application logged, one entry per line, instead of printing it. */
export class CapturingLogger extends ConsoleLogger {
  readonly lines: Array<{ level: string; message: string }> = [];
  override log(message: unknown): void {
    this.lines.push({ level: 'log', message: String(message) });
  }
  override warn(message: unknown): void {
    this.lines.push({ level: 'warn', message: String(message) });
  }
  override error(message: unknown, stack?: string): void {
    this.lines.push({ level: 'error', message: `${String(message)}${stack ? `\n${String(stack)}` : ''}` });
  }

  /** The lines logged so far that match `pattern`. */
  matching(pattern: RegExp): Array<{ level: string; message: string }> {
    return this.lines.filter((line) => pattern.test(line.message));
  }
}
