/** The base class of every error nest-dedup-queue throws on purpose. */
export class DedupQueueError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}
