import type { IsolatedTarget } from './workflow.registry';

/**
 * Checks at boot that worker threads can run the isolated workflows (`@Workflow({ isolate: 'thread' })`): load each
 * class from its file and build its provider. Implemented by the execution layer; a class so that it is its own
 * injection token.
 *
 * @throws DedupQueueConfigurationError naming each workflow a thread cannot run, and why
 */
export abstract class IsolatedWorkflowCheck {
  abstract verify(targets: IsolatedTarget[]): Promise<void>;
}
