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
