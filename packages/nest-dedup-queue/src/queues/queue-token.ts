/**
 * The injection token of the `WorkflowQueue` that `DedupQueueModule.registerQueue({ name })` provides, for
 * `@Inject(getQueueToken(name))`, `moduleRef.get(getQueueToken(name))` or
 * `Test.createTestingModule(...).overrideProvider(getQueueToken(name))`.
 */
export function getQueueToken(name: string): string {
  return `DedupQueueWorkflowQueue:${name}`;
}
