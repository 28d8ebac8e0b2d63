import * as libraryErrors from '../errors';
import type { WorkflowErrorInfo } from '../interfaces/workflow-status.interface';

type ErrorClass = abstract new (...args: never[]) => Error;

/** The classes a recorded error is revived as, by name: this library's errors and JavaScript's own. */
const REVIVABLE = new Map<string, ErrorClass>(
  [
    ...(Object.values(libraryErrors) as unknown[]).filter(
      (value): value is ErrorClass => typeof value === 'function' && value.prototype instanceof Error,
    ),
    TypeError,
    RangeError,
    SyntaxError,
    ReferenceError,
    EvalError,
    URIError,
  ].map((errorClass) => [errorClass.name, errorClass]),
);

const RECORDED_APART = ['name', 'message', 'stack'];
const PRIMITIVES = ['string', 'number', 'boolean'];

/** What the database records of a thrown value. */
export function toErrorInfo(thrown: unknown): WorkflowErrorInfo {
  if (thrown instanceof Error) {
    const fields = primitiveFields(thrown);
    return {
      name: thrown.name,
      message: thrown.message,
      ...(thrown.stack ? { stack: thrown.stack } : {}),
      ...(fields ? { fields } : {}),
    };
  }
  return { name: 'NonErrorThrown', message: typeof thrown === 'string' ? thrown : safeStringify(thrown) };
}

/** A recorded error without its stack, as statuses report it (the stack holds the server's file paths). */
export function withoutStack(info: WorkflowErrorInfo): Omit<WorkflowErrorInfo, 'stack'> {
  const { stack: _stack, ...rest } = info;
  return rest;
}

/**
 * The error a recorded one is thrown as again when its step is replayed: an instance of the class of that name
 * among this library's errors and JavaScript's built-in ones (its constructor is not called), otherwise a plain
 * `Error`; with the recorded `name`, `message`, `stack` and primitive fields either way.
 */
export function reviveError(info: WorkflowErrorInfo): Error {
  const errorClass = REVIVABLE.get(info.name) ?? Error;
  const error = Object.create(errorClass.prototype as object) as Error;
  Object.defineProperty(error, 'message', { value: info.message, writable: true, configurable: true });
  if (info.stack !== undefined) {
    Object.defineProperty(error, 'stack', { value: info.stack, writable: true, configurable: true });
  }
  if (error.name !== info.name) error.name = info.name;
  return Object.assign(error, info.fields);
}

/** The error's own enumerable properties that hold a string, number, boolean or null (a `code`, an ID). */
function primitiveFields(error: Error): WorkflowErrorInfo['fields'] {
  const fields = Object.entries(error).filter(
    ([key, value]) => !RECORDED_APART.includes(key) && (value === null || PRIMITIVES.includes(typeof value)),
  );
  return fields.length ? Object.fromEntries(fields) : undefined;
}

function safeStringify(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
