/**
 * Whether a run still holds its slot. `freed`, made when first asked for (a shutdown waiting for the running
 * workflows), resolves once it does not.
 */
export class RunSlot {
  private isFree = false;
  private promise?: Promise<void>;
  private resolve?: () => void;

  get freed(): Promise<void> {
    this.promise ??= this.isFree ? Promise.resolve() : new Promise((resolve) => (this.resolve = resolve));
    return this.promise;
  }

  free(): void {
    this.isFree = true;
    this.resolve?.();
  }
}
