/** A value a UI binds to: the same snapshot object until it changes, one notification per change. */
export declare class Subscribable<T> {
    /** Calls fn with the snapshot now and after every change; returns the unsubscribe function. */
    subscribe: (fn: (s: T) => void) => (() => void);
    /** The current snapshot: the same object until it changes. */
    getSnapshot: () => T;
}
