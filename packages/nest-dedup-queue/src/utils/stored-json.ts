/** Why a value cannot be stored as JSON without changing, with the path to it (e.g. `args[0].tags`). */
export class UnstorableValueError extends Error {
  constructor(
    readonly path: string,
    readonly reason: string,
  ) {
    super(`${path} ${reason}`);
    this.name = 'UnstorableValueError';
  }
}

/**
 * Serialises a value to JSON text for storage, refusing what JSON would lose or cannot hold instead of silently
 * changing it: BigInt, functions, symbols, Map, Set, NaN and Infinity, and circular references.
 * `Date` becomes its ISO string and `undefined` object properties are dropped, as `JSON.stringify` does.
 */
export function toStoredJson(value: unknown, rootPath: string): string {
  assertStorable(value, rootPath, new Set());
  return JSON.stringify(value) ?? 'null';
}

function assertStorable(value: unknown, path: string, ancestors: Set<object>): void {
  switch (typeof value) {
    case 'bigint':
      throw new UnstorableValueError(path, 'is a BigInt, which JSON cannot hold; pass it as a string');
    case 'function':
    case 'symbol':
      throw new UnstorableValueError(path, `is a ${typeof value}, which JSON cannot hold`);
    case 'number':
      if (!Number.isFinite(value)) {
        throw new UnstorableValueError(path, `is ${value}, which JSON cannot hold`);
      }
      return;
    case 'object':
      break;
    default:
      return;
  }
  if (value === null || value instanceof Date) {
    return;
  }
  if (value instanceof Map || value instanceof Set) {
    throw new UnstorableValueError(
      path,
      `is a ${value.constructor.name}, which JSON would store as {}; pass an array or object`,
    );
  }
  if (ancestors.has(value)) {
    throw new UnstorableValueError(path, 'is a circular reference, which JSON cannot hold');
  }
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    return;
  }
  ancestors.add(value);
  if (Array.isArray(value)) {
    value.forEach((item, index) => assertStorable(item, `${path}[${index}]`, ancestors));
  } else {
    for (const [key, item] of Object.entries(value)) {
      if (item !== undefined) {
        assertStorable(item, `${path}.${key}`, ancestors);
      }
    }
  }
  ancestors.delete(value);
}

/** Parses stored JSON text; SQL NULL (a workflow that returned undefined) reads back as undefined. */
export function fromStoredJson<T>(text: string | null): T {
  return (text === null ? undefined : JSON.parse(text)) as T;
}
