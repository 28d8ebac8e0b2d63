import type { Readable } from 'stream';

/** Splits child process output into lines, forwards each line, and keeps the last ones for error messages. */
export class LogTail {
  private readonly lines: string[] = [];

  constructor(
    private readonly forward?: (line: string) => void,
    private readonly keep = 200,
  ) {}

  /** Reads `stream` line by line until it ends; `onLine` additionally sees every line (without prefix). */
  attach(stream: Readable | null, prefix: string, onLine?: (line: string) => void): void {
    if (!stream) return;
    let partial = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      const parts = (partial + chunk).split(/\r?\n/);
      partial = parts.pop() ?? '';
      for (const line of parts) this.push(prefix, line, onLine);
    });
    stream.on('end', () => {
      if (partial) this.push(prefix, partial, onLine);
      partial = '';
    });
  }

  /** Records a line of our own (not from a child). */
  note(line: string): void {
    this.push('', line);
  }

  /** The kept lines, oldest first. */
  text(): string {
    return this.lines.join('\n');
  }

  private push(prefix: string, line: string, onLine?: (line: string) => void): void {
    const full = prefix + line;
    this.lines.push(full);
    if (this.lines.length > this.keep) this.lines.shift();
    try {
      this.forward?.(full);
    } catch {
      // A failing log callback must not break the server's output handling.
    }
    onLine?.(line);
  }
}
