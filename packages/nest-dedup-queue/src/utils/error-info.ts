import type { WorkflowErrorInfo } from '../interfaces/workflow-status.interface';

/** What the database records of a thrown value. */
export function toErrorInfo(thrown: unknown): WorkflowErrorInfo {
  if (thrown instanceof Error) {
    return { name: thrown.name, message: thrown.message, ...(thrown.stack ? { stack: thrown.stack } : {}) };
  }
  return { name: 'NonErrorThrown', message: typeof thrown === 'string' ? thrown : safeStringify(thrown) };
}

function safeStringify(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
