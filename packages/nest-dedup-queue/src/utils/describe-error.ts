/** A driver error in one line: its code (SQLSTATE or socket code) and message, never a stack. */
export function describeError(error: unknown): string {
  const inner = (error as { cause?: unknown; driverError?: unknown } | null)?.driverError ?? error;
  const { code, message } = (inner ?? {}) as { code?: unknown; message?: unknown };
  const text = typeof message === 'string' && message.length > 0 ? message : String(inner);
  return typeof code === 'string' && !text.includes(code) ? `${code}: ${text}` : text;
}
