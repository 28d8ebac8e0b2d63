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

/** The size and depth limits of a stored value (`InputLimits`, resolved). */
export interface ValueLimits {
  maxValueBytes: number;
  maxDepth: number;
}

/**
 * Serialises a value to JSON text for storage, refusing what JSON would lose or cannot hold instead of silently
 * changing it: BigInt, functions, symbols, Map, Set, NaN and Infinity, and circular references; and what is over
 * `limits`: nested deeper than `maxDepth`, or more than `maxValueBytes` of JSON (told before serialising when its
 * strings alone are more). `Date` becomes its ISO string and `undefined` object properties are dropped, as
 * `JSON.stringify` does.
 */
export function toStoredJson(value: unknown, rootPath: string, limits: ValueLimits): string {
  const walk: Walk = { rootPath, limits, stringUnits: 0, segments: [] };
  assertStorable(value, new Set(), 1, walk);
  let text: string;
  try {
    text = JSON.stringify(value) ?? 'null';
  } catch (error) {
    // NOTE: a toJSON() may return what the walk did not see: a structure too deep for JSON.stringify's stack.
    if (error instanceof RangeError) throw new UnstorableValueError(rootPath, `cannot be serialised: ${error.message}`);
    throw error;
  }
  const bytes = Buffer.byteLength(text);
  if (bytes > limits.maxValueBytes) {
    throw new UnstorableValueError(
      rootPath,
      `is ${bytes} bytes of JSON, over the limit of ${limits.maxValueBytes} (inputLimits.maxValueBytes)`,
    );
  }
  return text;
}

interface Walk {
  rootPath: string;
  limits: ValueLimits;
  /** The UTF-16 units of the strings and keys seen: no more bytes than the JSON text will have. */
  stringUnits: number;
  /** The path from the root to the value being walked: array indexes and property names. */
  segments: (string | number)[];
}

/** Where the walk is, for an error: `args[0].tags`. */
function pathOf(walk: Walk): string {
  let path = walk.rootPath;
  for (const segment of walk.segments) path += typeof segment === 'number' ? `[${segment}]` : `.${segment}`;
  return path;
}

function assertStorable(value: unknown, ancestors: Set<object>, depth: number, walk: Walk): void {
  switch (typeof value) {
    case 'bigint':
      throw new UnstorableValueError(pathOf(walk), 'is a BigInt, which JSON cannot hold; pass it as a string');
    case 'function':
    case 'symbol':
      throw new UnstorableValueError(pathOf(walk), `is a ${typeof value}, which JSON cannot hold`);
    case 'number':
      if (!Number.isFinite(value)) {
        throw new UnstorableValueError(pathOf(walk), `is ${value}, which JSON cannot hold`);
      }
      return;
    case 'string':
      return countUnits(value.length, walk);
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
      pathOf(walk),
      `is a ${value.constructor.name}, which JSON would store as {}; pass an array or object`,
    );
  }
  if (ancestors.has(value)) {
    throw new UnstorableValueError(pathOf(walk), 'is a circular reference, which JSON cannot hold');
  }
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    return;
  }
  if (depth > walk.limits.maxDepth) {
    throw new UnstorableValueError(
      pathOf(walk),
      `is nested deeper than ${walk.limits.maxDepth} levels of arrays and objects (inputLimits.maxDepth)`,
    );
  }
  ancestors.add(value);
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index++) {
      walk.segments.push(index);
      assertStorable(value[index], ancestors, depth + 1, walk);
      walk.segments.pop();
    }
  } else {
    for (const key of Object.keys(value)) {
      const item = (value as Record<string, unknown>)[key];
      if (item !== undefined) {
        countUnits(key.length, walk);
        walk.segments.push(key);
        assertStorable(item, ancestors, depth + 1, walk);
        walk.segments.pop();
      }
    }
  }
  ancestors.delete(value);
}

function countUnits(units: number, walk: Walk): void {
  walk.stringUnits += units;
  if (walk.stringUnits > walk.limits.maxValueBytes) {
    throw new UnstorableValueError(
      walk.rootPath,
      `is over ${walk.limits.maxValueBytes} bytes of JSON, the limit (inputLimits.maxValueBytes)`,
    );
  }
}

/** Parses stored JSON text; SQL NULL (a workflow that returned undefined) reads back as undefined. */
export function fromStoredJson<T>(text: string | null): T {
  return (text === null ? undefined : JSON.parse(text)) as T;
}
