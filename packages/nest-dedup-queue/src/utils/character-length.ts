/**
 * The length of a string in characters, as the module's limits count them: Unicode code points, the way Postgres
 * counts the characters of a UTF-8 `text` (`char_length`), so `'😀'` is one character although JavaScript's
 * `length` (UTF-16 code units) says 2. A lone surrogate counts as one.
 */
export function characterLength(value: string): number {
  let count = 0;
  for (let index = 0; index < value.length; index++) {
    const unit = value.charCodeAt(index);
    if (unit >= 0xd800 && unit <= 0xdbff && index + 1 < value.length) {
      const next = value.charCodeAt(index + 1);
      if (next >= 0xdc00 && next <= 0xdfff) index++;
    }
    count++;
  }
  return count;
}

/** Whether `value` has more than `max` characters (code points); looks at no more of it than it needs to. */
export function exceedsCharacters(value: string, max: number): boolean {
  // NOTE: a code point is one or two UTF-16 units, so most strings are decided by `length` alone.
  if (value.length <= max) return false;
  if (value.length > 2 * max) return true;
  return characterLength(value) > max;
}
