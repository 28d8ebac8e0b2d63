import { WORKFLOW_METADATA } from '../dedup-queue.constants';
import type { WorkflowMetadata } from '../interfaces/workflow-metadata.interface';

/** The key that marks an encoded callback or remote object in a value crossing the thread boundary. */
const MARK = '__dedupQueueCrossing';

/** A function of the thread that the main thread may call back while the call it was passed to runs. */
interface EncodedCallback {
  [MARK]: 'callback';
  id: number;
}

/** An object (or function) of the main thread the thread gets a stub of: the stub's methods are forwarded calls. */
export interface EncodedRemote {
  [MARK]: 'remote';
  id: number;
  /** Its own enumerable properties that hold data (a handle's `workflowId`), not objects with methods. */
  data: Record<string, unknown>;
  methods: string[];
  asyncIterable: boolean;
  callable: boolean;
}

const KEEP = Symbol('keep');

/**
 * Encodes the arguments an isolated body passes to a forwarded call: a `@Workflow()` method becomes its registered
 * name (which every call that takes one accepts), an object with `toJSON` becomes what that returns (what storage
 * would keep of it), any other function a callback the main thread may call (`keepCallback` numbers it). The rest,
 * in arrays and plain objects, crosses as the structured clone copies it.
 */
export function encodeForMain(value: unknown, keepCallback: (fn: (...args: unknown[]) => unknown) => number): unknown {
  return walk(value, (item) => {
    if (typeof item === 'function') {
      const metadata = Reflect.getMetadata(WORKFLOW_METADATA, item) as WorkflowMetadata | undefined;
      if (metadata) return metadata.name;
      return {
        [MARK]: 'callback',
        id: keepCallback(item as (...args: unknown[]) => unknown),
      } satisfies EncodedCallback;
    }
    if (isObject(item) && !isCloneable(item) && typeof (item as { toJSON?: unknown }).toJSON === 'function') {
      return encodeForMain((item as { toJSON(): unknown }).toJSON(), keepCallback);
    }
    return KEEP;
  });
}

/** Decodes what `encodeForMain` made: each callback becomes a function that calls it in the thread. */
export function decodeFromThread(value: unknown, callback: (id: number) => (...args: unknown[]) => unknown): unknown {
  return walk(value, (item) => (isMarked(item, 'callback') ? callback((item as EncodedCallback).id) : KEEP));
}

/**
 * Encodes what a forwarded call returns to the thread: an object with methods (a workflow handle, an async
 * iterator), or a function, stays in the main thread (`keepObject` numbers it) and the thread gets a stub of it;
 * the rest crosses as the structured clone copies it.
 */
export function encodeForThread(value: unknown, keepObject: (object: object) => number): unknown {
  return walk(value, (item) => {
    if (typeof item === 'function') return remote(item, keepObject, true);
    if (!isObject(item) || Array.isArray(item) || isCloneable(item)) return KEEP;
    return isPlain(item) && !hasMethods(item) ? KEEP : remote(item, keepObject, false);
  });
}

/** Decodes what `encodeForThread` made: each remote object becomes what `stub` makes of it. */
export function decodeFromMain(value: unknown, stub: (remote: EncodedRemote) => unknown): unknown {
  return walk(value, (item) => (isMarked(item, 'remote') ? stub(item as EncodedRemote) : KEEP));
}

function remote(item: object, keepObject: (object: object) => number, callable: boolean): EncodedRemote {
  const data = Object.fromEntries(Object.entries(item).filter(([, property]) => isData(property)));
  return {
    [MARK]: 'remote',
    id: keepObject(item),
    data,
    methods: callable ? [] : [...ownMethodNames(item), ...methodNames(Object.getPrototypeOf(item) as object | null)],
    asyncIterable: typeof (item as { [Symbol.asyncIterator]?: unknown })[Symbol.asyncIterator] === 'function',
    callable,
  };
}

/** The names of an object's own properties that hold functions. */
function ownMethodNames(item: object): string[] {
  return Object.keys(item).filter((key) => typeof (item as Record<string, unknown>)[key] === 'function');
}

/** Whether a plain object holds functions of its own (`{ [Symbol.asyncIterator]() {...} }`). */
function hasMethods(item: object): boolean {
  return Reflect.ownKeys(item).some((key) => typeof (item as Record<string | symbol, unknown>)[key] === 'function');
}

/** The names of the methods of a prototype and those it inherits, up to `Object.prototype`. */
export function methodNames(prototype: object | null): string[] {
  const names = new Set<string>();
  for (let proto = prototype; proto && proto !== Object.prototype;) {
    for (const name of Object.getOwnPropertyNames(proto)) {
      const descriptor = Object.getOwnPropertyDescriptor(proto, name);
      if (name !== 'constructor' && typeof descriptor?.value === 'function') names.add(name);
    }
    proto = Object.getPrototypeOf(proto) as object | null;
  }
  return [...names];
}

/** Copies `value` through arrays and plain objects, replacing what `replace` replaces (cycles kept as cycles). */
function walk(value: unknown, replace: (item: unknown) => unknown, seen = new Map<object, unknown>()): unknown {
  const replaced = replace(value);
  if (replaced !== KEEP) return replaced;
  if (!isObject(value) || !(Array.isArray(value) || isPlain(value))) return value;
  if (seen.has(value)) return seen.get(value);
  if (Array.isArray(value)) {
    const copy: unknown[] = [];
    seen.set(value, copy);
    for (const item of value) copy.push(walk(item, replace, seen));
    return copy;
  }
  const copy: Record<string, unknown> = {};
  seen.set(value, copy);
  for (const [key, item] of Object.entries(value)) copy[key] = walk(item, replace, seen);
  return copy;
}

/** Whether a value is data through and through: primitives, cloneable objects, arrays and plain objects of data. */
function isData(value: unknown, seen = new Set<object>()): boolean {
  if (typeof value === 'function') return false;
  if (!isObject(value) || isCloneable(value) || seen.has(value)) return true;
  if (!Array.isArray(value) && !isPlain(value)) return false;
  seen.add(value);
  return Object.values(value).every((item) => isData(item, seen));
}

function isObject(value: unknown): value is object {
  return typeof value === 'object' && value !== null;
}

// NOTE: by shape, not by identity: a message arrives with the objects of the realm that received it, which under a
// test runner's sandbox (jest) is not the realm of the code reading it.
function isPlain(value: object): boolean {
  const proto = Object.getPrototypeOf(value) as object | null;
  return proto === null || Object.getPrototypeOf(proto) === null;
}

const CLONED_WITH_CLASS = new Set(['Date', 'RegExp', 'Map', 'Set', 'Error', 'ArrayBuffer']);

/** What the structured clone copies with its class (the rest of the objects with a class lose it). */
function isCloneable(value: object): boolean {
  return CLONED_WITH_CLASS.has(Object.prototype.toString.call(value).slice(8, -1)) || ArrayBuffer.isView(value);
}

function isMarked(value: unknown, kind: EncodedCallback[typeof MARK] | EncodedRemote[typeof MARK]): boolean {
  return isObject(value) && isPlain(value) && (value as Record<string, unknown>)[MARK] === kind;
}
