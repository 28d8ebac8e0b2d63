/**
 * Server settings for every node of a benchmark's cluster from `CITUS_NODE_SETTINGS` (`name=value` pairs separated
 * by commas, e.g. `max_connections=50,citus.max_cached_conns_per_worker=4`), over test/support/citus-cluster.ts's
 * defaults; none when unset.
 */
export function nodeSettingsFromEnv(): Record<string, string> {
  const pairs = (process.env.CITUS_NODE_SETTINGS ?? '').split(',').filter((pair) => pair.trim() !== '');
  return Object.fromEntries(
    pairs.map((pair) => {
      const [name, ...value] = pair.split('=');
      if (value.length === 0) throw new Error(`CITUS_NODE_SETTINGS: "${pair}" is not name=value`);
      return [name.trim(), value.join('=').trim()];
    }),
  );
}
