import { Inject, Injectable, OnModuleInit, Type } from '@nestjs/common';
import { DiscoveryService, ModuleRef } from '@nestjs/core';
import { DedupQueueConfig } from '../dedup-queue.config';
import { INJECTED_QUEUES_METADATA } from '../dedup-queue.constants';
import { DedupQueueConfigurationError } from '../errors/dedup-queue-configuration.error';
import { findQueueRegistrations } from './queue-registration';
import { getQueueToken } from './queue-token';

/** What the check needs of a discovered provider or controller (Nest's `InstanceWrapper`). */
interface DiscoveredClass {
  metatype: unknown;
  inject?: unknown;
  isAlias: boolean;
  host?: { name: string; providers: Map<unknown, { instance: unknown }> };
}

/**
 * Explains at boot every `@InjectQueue(name)` that finds no queue: a name no `registerQueue()` declares (a typo, or a
 * queue of `forRoot({ queues })`, which `QueueService` serves), or a declared queue the injecting class's module does
 * not import. The message names the class, its module, the queue, the declared queues and what to change.
 */
@Injectable()
export class InjectedQueuesExplorer implements OnModuleInit {
  constructor(
    private readonly discovery: DiscoveryService,
    private readonly config: DedupQueueConfig,
  ) {}

  async onModuleInit(): Promise<void> {
    const classes = [...this.discovery.getProviders(), ...this.discovery.getControllers()] as DiscoveredClass[];
    for (const found of classes) {
      if (found.isAlias || found.inject || typeof found.metatype !== 'function' || !found.host) continue;
      const names = Reflect.getMetadata(INJECTED_QUEUES_METADATA, found.metatype) as string[] | undefined;
      for (const name of new Set(names)) {
        if (!(await this.visible(name, found.host))) throw this.missing(name, found.metatype as Type, found.host.name);
      }
    }
  }

  /** Whether Nest resolves the queue's token in `host` (its providers and what its imports export). */
  private async visible(name: string, host: NonNullable<DiscoveredClass['host']>): Promise<boolean> {
    const moduleRef = host.providers.get(ModuleRef)?.instance as ModuleRef | undefined;
    if (!moduleRef) return true;
    class QueueProbe {
      constructor(readonly queue: unknown) {}
    }
    Inject(getQueueToken(name))(QueueProbe, undefined, 0);
    return moduleRef.create(QueueProbe).then(
      () => true,
      () => false,
    );
  }

  private missing(name: string, injector: Type, moduleName: string): DedupQueueConfigurationError {
    const registrations = findQueueRegistrations(this.discovery);
    const declared = [...this.config.queues.keys()].map((queue) => `"${queue}"`).join(', ') || 'none';
    const where = `${injector.name} (in ${moduleName}) injects @InjectQueue('${name}')`;
    const registration = registrations.find((found) => found.queues.some((queue) => queue?.name === name));
    if (registration) {
      return new DedupQueueConfigurationError(
        `DedupQueueModule: ${where}, but ${moduleName} does not see that queue: it is declared by ` +
          `${registration.declaredAt}. Import the module holding that registerQueue() into ${moduleName} ` +
          `(with the registerQueue() module in its exports), or move the declaration there`,
      );
    }
    if (this.config.queues.has(name)) {
      return new DedupQueueConfigurationError(
        `DedupQueueModule: ${where}, but "${name}" is declared in DedupQueueModule.forRoot({ queues }), whose queues ` +
          `are reached through QueueService (queueService.enqueue('${name}', ...)), not @InjectQueue. Inject ` +
          `QueueService, or move the declaration to DedupQueueModule.registerQueue({ name: '${name}' }) in the ` +
          `imports of ${moduleName}`,
      );
    }
    return new DedupQueueConfigurationError(
      `DedupQueueModule: ${where}, but no DedupQueueModule.registerQueue() declares a queue "${name}" ` +
        `(declared queues: ${declared}). Declare it in the imports of ${moduleName}: ` +
        `DedupQueueModule.registerQueue({ name: '${name}' }), or fix the name`,
    );
  }
}
