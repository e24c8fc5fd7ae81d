// The subscribe/getSnapshot pair every store of the client hands a UI
// (React's useSyncExternalStore, a Svelte store, a Vue ref's source).

/** A listener of snapshots of type T, compared bivariantly, so a store of a row type is a store of rows. */
type Listener<T> = { f(s: T): void }["f"];

/** A value a UI binds to: the same snapshot object until it changes, one notification per change. */
export class Subscribable<T> {
  /** @internal */ l_ = new Set<Listener<T>>();
  /** @internal */ constructor(/** @internal */ public s_: T) {}
  /** Calls fn with the snapshot now and after every change; returns the unsubscribe function. */
  subscribe = (fn: (s: T) => void): (() => void) => {
    this.l_.add(fn);
    fn(this.s_);
    return () => this.l_.delete(fn);
  };
  /** The current snapshot: the same object until it changes. */
  getSnapshot = (): T => this.s_;
  /** @internal */ put_(s: T) {
    this.s_ = s;
    for (const fn of [...this.l_]) fn(s);
  }
}
