import { Logger } from '@nestjs/common';

const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g;
const SHORT_ESCAPES: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/**
 * The text with its control characters escaped (`\n`, `\r`, `\t`, others as `\u001b`), line and paragraph separators
 * included: a workflow ID, a name or an error message can then neither start a log line of its own (a forged line)
 * nor drive the operator's terminal.
 */
export function escapeControlCharacters(text: string): string {
  return text.replace(
    CONTROL_CHARACTERS,
    (character) => SHORT_ESCAPES[character] ?? `\\u${character.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/** A message as one line: a string escaped, anything else (an object for a JSON logger) as it is. */
function oneLine(message: unknown): unknown {
  return typeof message === 'string' ? escapeControlCharacters(message) : message;
}

/**
 * Nest's `Logger` (so the application's logger still does the writing) whose every message is one line: the module
 * logs workflow IDs, names and error messages that callers and workflow bodies choose, and none of them may forge a
 * line. Every logger of the module is one of these. A stack given to `error` keeps its lines, with the error's own
 * message in its first line escaped (see `stackOf`).
 */
export class ModuleLogger extends Logger {
  override log(message: unknown, ...optionalParams: unknown[]): void {
    super.log(oneLine(message), ...optionalParams);
  }

  override warn(message: unknown, ...optionalParams: unknown[]): void {
    super.warn(oneLine(message), ...optionalParams);
  }

  override error(message: unknown, ...optionalParams: unknown[]): void {
    super.error(oneLine(message), ...optionalParams);
  }

  override debug(message: unknown, ...optionalParams: unknown[]): void {
    super.debug(oneLine(message), ...optionalParams);
  }

  override verbose(message: unknown, ...optionalParams: unknown[]): void {
    super.verbose(oneLine(message), ...optionalParams);
  }
}

/** An error's stack for a log: its lines kept, the error's own message in it escaped (it may spread over lines). */
export function stackOf(error: Error): string | undefined {
  const { stack, message } = error;
  if (!stack || !message) return stack;
  const escaped = escapeControlCharacters(message);
  return escaped === message ? stack : stack.split(message).join(escaped);
}
