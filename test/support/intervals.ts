/** Measures over [start, end] intervals, e.g. when workflows ran, to check concurrency limits. */

/** The largest number of intervals that overlap at one instant (an end and a start at the same instant do not). */
export function maxOverlap(intervals: Array<{ start: number; end: number }>): number {
  const events = intervals.flatMap(({ start, end }) => [
    { at: start, delta: 1 },
    { at: end, delta: -1 },
  ]);
  events.sort((a, b) => a.at - b.at || a.delta - b.delta);
  let current = 0;
  let max = 0;
  for (const { delta } of events) {
    current += delta;
    max = Math.max(max, current);
  }
  return max;
}
