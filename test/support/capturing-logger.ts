import { ConsoleLogger } from '@nestjs/common';

/** Keeps what the application logged, one entry per line (with its context, if any), instead of printing it. */
export class CapturingLogger extends ConsoleLogger {
  readonly lines: Array<{ level: string; message: string; context?: string }> = [];
  override log(message: unknown, context?: unknown): void {
    this.lines.push({ level: 'log', message: String(message), ...contextOf(context) });
  }
  override warn(message: unknown, context?: unknown): void {
    this.lines.push({ level: 'warn', message: String(message), ...contextOf(context) });
  }
  override error(message: unknown, stack?: string): void {
    this.lines.push({ level: 'error', message: `${String(message)}${stack ? `\n${String(stack)}` : ''}` });
  }

  /** The lines logged so far that match `pattern`. */
  matching(pattern: RegExp): Array<{ level: string; message: string; context?: string }> {
    return this.lines.filter((line) => pattern.test(line.message));
  }
}

function contextOf(context: unknown): { context?: string } {
  return typeof context === 'string' ? { context } : {};
}
