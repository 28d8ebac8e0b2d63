import type { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';

/** A decorated method of a provider instance, found at boot. */
export interface DecoratedMethod<M> {
  /** The provider instance the method runs on. */
  instance: Record<string, (...args: unknown[]) => unknown>;
  methodName: string;
  /** What the decorator recorded on the method. */
  metadata: M;
  /** The name of the provider's class. */
  className: string;
  /** Where it was declared, for messages: `ClassName.methodName`. */
  declaredAt: string;
}

/**
 * The methods of the application's providers that carry the metadata `key`, on class, factory (`useFactory`) and
 * value (`useValue`) providers alike: the instance's own prototype is scanned, so a provider made by a factory is
 * found by what it is. Each instance is visited once, whatever the number of tokens it is provided under.
 *
 * @param decorator the decorator's name for messages, e.g. `'@Workflow()'`
 * @param why why a request-scoped provider cannot host it, e.g. `'workflows run outside any request'`
 * @throws DedupQueueConfigurationError when such a method sits on a request-scoped provider
 */
export function findDecoratedMethods<M>(
  discovery: DiscoveryService,
  scanner: MetadataScanner,
  key: string,
  decorator: string,
  why: string,
): DecoratedMethod<M>[] {
  const found: DecoratedMethod<M>[] = [];
  const seen = new Set<object>();
  for (const wrapper of discovery.getProviders()) {
    if (wrapper.isAlias) continue;
    const instance = wrapper.instance as DecoratedMethod<M>['instance'] | undefined;
    const prototype =
      instance && typeof instance === 'object'
        ? (Object.getPrototypeOf(instance) as Record<string, unknown> | null)
        : (wrapper.metatype as { prototype?: Record<string, unknown> } | undefined)?.prototype;
    if (!prototype || prototype === Object.prototype) continue;
    const methods = scanner.getAllMethodNames(prototype).flatMap((methodName) => {
      const method = prototype[methodName];
      const metadata = typeof method === 'function' ? (Reflect.getMetadata(key, method) as M | undefined) : undefined;
      return metadata === undefined ? [] : [{ methodName, metadata }];
    });
    if (methods.length === 0) continue;
    const className = (prototype.constructor as { name?: string } | undefined)?.name || String(wrapper.name);
    if (!wrapper.isDependencyTreeStatic()) {
      throw new DedupQueueConfigurationError(
        `${className} has ${decorator} methods but is request-scoped (or depends on a request-scoped provider); ` +
          `${why}, so make ${className} a singleton (the default scope)`,
      );
    }
    if (!instance || seen.has(instance)) continue;
    seen.add(instance);
    for (const { methodName, metadata } of methods) {
      found.push({ instance, methodName, metadata, className, declaredAt: `${className}.${methodName}` });
    }
  }
  return found;
}
