/**
 * `work`, or a rejection with `message` once `timeoutMs` passed (work that settles later is ignored). For reads
 * that must not hang a probe or a scrape while the database does not answer.
 */
export async function settleWithin<T>(work: Promise<T>, timeoutMs: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), timeoutMs);
  });
  work.catch(() => undefined);
  try {
    return await Promise.race([work, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}
