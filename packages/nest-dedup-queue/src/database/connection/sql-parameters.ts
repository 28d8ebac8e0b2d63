/**
 * Positional parameters handed out by name: `ref(name, type, value)` gives `$n::type`, numbered on the first use of
 * `name` (the same name twice is the same parameter), and `values(context)` gives their values in that order. A
 * statement built once with it keeps its text (prepared statements stay valid) and its values cannot drift from it.
 */
export class SqlParameters<C> {
  private readonly getters: ((context: C) => unknown)[] = [];
  private readonly refs = new Map<string, string>();

  ref(name: string, type: string, value: (context: C) => unknown): string {
    let ref = this.refs.get(name);
    if (ref === undefined) {
      this.getters.push(value);
      ref = `$${this.getters.length}::${type}`;
      this.refs.set(name, ref);
    }
    return ref;
  }

  values(context: C): unknown[] {
    return this.getters.map((get) => get(context));
  }
}

/**
 * A statement that reads some of `values` by number (`$1` is `values[0]`), renumbered to read exactly those, in the
 * order of their first use, with their values: the server cannot tell the type of a parameter no statement reads.
 */
export function usedParameters(sql: string, values: unknown[]): [string, unknown[]] {
  const used: number[] = [];
  const renumbered = sql.replace(/\$(\d+)/g, (_, n: string) => {
    const at = used.includes(Number(n)) ? used.indexOf(Number(n)) : used.push(Number(n)) - 1;
    return `$${at + 1}`;
  });
  return [renumbered, used.map((n) => values[n - 1])];
}

/**
 * A one-dimensional array parameter as the text `pg` sends for an array (`{"a","1",NULL}`), taken from `items` by
 * `value` (strings, numbers and booleans; `pg` writes dates itself): the same text, without the intermediate array and without a regular expression per element that needs no
 * escaping (a batch statement's arrays are built for every batch).
 */
export function arrayParameter<T>(
  items: readonly T[],
  value: (item: T) => string | number | boolean | null | undefined,
): string {
  let text = '{';
  for (let i = 0; i < items.length; i++) {
    if (i > 0) text += ',';
    const element = value(items[i]);
    if (element === null || element === undefined) {
      text += 'NULL';
      continue;
    }
    const s = String(element);
    text += `"${s.includes('"') || s.includes('\\') ? s.replace(/\\/g, '\\\\').replace(/"/g, '\\"') : s}"`;
  }
  return `${text}}`;
}
