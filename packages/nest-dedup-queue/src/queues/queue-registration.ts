import type { DiscoveryService } from '@nestjs/core';
import type { QueueOptions } from '../interfaces/queue-options.interface';

/** The queues one `DedupQueueModule.registerQueue()` call declares, found at boot by the module's configuration. */
export class QueueRegistration {
  constructor(
    readonly queues: readonly QueueOptions[],
    /** Where it was declared, for messages: the file and line of the `registerQueue()` call when known. */
    readonly declaredAt: string,
  ) {}
}

/** The provider token under which `registerQueue()` provides its registration. */
export function queueRegistrationToken(queues: readonly QueueOptions[]): string {
  return `DedupQueueRegistration:${queues.map((queue) => String(queue?.name)).join(',')}`;
}

/**
 * Every queue registration of this application. NOTE: value providers hold their instance from the time the modules
 * are scanned, so the registrations are all there before any provider is made (and each application sees only its
 * own).
 */
export function findQueueRegistrations(discovery: DiscoveryService): QueueRegistration[] {
  const found = new Set<QueueRegistration>();
  for (const wrapper of discovery.getProviders()) {
    if (!wrapper.isAlias && wrapper.instance instanceof QueueRegistration) found.add(wrapper.instance);
  }
  return [...found];
}
