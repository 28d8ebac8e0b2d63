const loaded = new Map<string, unknown>();

/**
 * An optional peer dependency (`prom-client`, `@opentelemetry/api`, `@nestjs/terminus`), required the first time it
 * is needed and remembered; undefined when the application did not install it.
 */
export function optionalPeer<T>(name: string): T | undefined {
  if (!loaded.has(name)) {
    try {
      // eslint-disable-next-line @typescript-eslint/no-require-imports -- lazy, so loading the library never needs it
      loaded.set(name, require(name));
    } catch (error) {
      if ((error as { code?: string }).code !== 'MODULE_NOT_FOUND') throw error;
      loaded.set(name, undefined);
    }
  }
  return loaded.get(name) as T | undefined;
}
