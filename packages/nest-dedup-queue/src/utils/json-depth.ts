/**
 * Whether a parsed JSON value nests arrays and objects deeper than `maxDepth` (a top-level array or object is 1
 * deep). It walks without recursion, so a value of any depth is safe to ask about (`JSON.stringify` is not: it
 * throws a RangeError some thousands of levels down).
 */
export function nestsDeeperThan(value: unknown, maxDepth: number): boolean {
  const pending: Array<{ item: unknown; depth: number }> = [{ item: value, depth: 1 }];
  for (let next = pending.pop(); next; next = pending.pop()) {
    const { item, depth } = next;
    if (item === null || typeof item !== 'object') continue;
    if (depth > maxDepth) return true;
    for (const child of Array.isArray(item) ? item : Object.values(item))
      pending.push({ item: child, depth: depth + 1 });
  }
  return false;
}
