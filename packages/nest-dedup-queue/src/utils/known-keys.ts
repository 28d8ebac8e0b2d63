/**
 * The first own key of `value` that is not in `known`, told as a sentence end: `is not an option; did you mean
 * "deduplicationId"?` when a known key is a near miss (another case, or the key's letters in order within it, as
 * `dedupId` in `deduplicationId`). Undefined when every key is known.
 */
export function unknownKey(value: object, known: readonly string[]): { key: string; reason: string } | undefined {
  const key = Object.keys(value).find((candidate) => !known.includes(candidate));
  if (key === undefined) return undefined;
  const meant = nearMiss(key, known);
  return { key, reason: `is not an option${meant ? `; did you mean "${meant}"?` : ` (options: ${known.join(', ')})`}` };
}

function nearMiss(key: string, known: readonly string[]): string | undefined {
  const folded = key.toLowerCase();
  const exact = known.find((candidate) => candidate.toLowerCase() === folded);
  if (exact || folded.length < 3) return exact;
  return known.find((candidate) => isSubsequence(folded, candidate.toLowerCase()) && candidate[0] === key[0]);
}

function isSubsequence(short: string, long: string): boolean {
  let at = 0;
  for (const char of long) if (char === short[at]) at += 1;
  return at === short.length;
}
