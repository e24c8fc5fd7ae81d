import type { Conditions, Row } from "./protocol.js";
import type { ScopeCopy } from "./replica.js";
import type { ScopeRecord } from "./storage.js";
import type { Problem } from "./errors.js";
import { Subscribable } from "./subscribable.js";
/** A scope's state: loading (nothing yet), cached (rows from the store), catching-up, live, error. */
export type ScopeState = "loading" | "cached" | "catching-up" | "live" | "error";
/** What a scope's subscribe/getSnapshot pair hands the UI; R is the row type (with a schema: the resource's row). */
export interface ScopeSnapshot<R extends Row = Row> {
    readonly rows: readonly R[];
    readonly byKey: ReadonlyMap<string, R>;
    readonly state: ScopeState;
    /** Why the scope is in state error: code, message (presentable) and detail (for developers). */
    readonly error?: Problem;
}
/** The stored form of a scope's copy with the given cursor and rows. */
export declare const record: (c: ScopeCopy, cursor: string, rows: Map<string, Row>) => ScopeRecord;
/** Codes that refuse a scope for good: it is not subscribed again until retried. */
export declare const FATAL_SUB_CODES: string[];
/** A scope's resources, as a subscribe frame or poll request names them. */
export declare const names: (s: Scope) => {
    resources: string[];
    resource?: undefined;
} | {
    resource: string;
    resources?: undefined;
};
export declare const randomHex: () => string;
/** A scope's digest: its store key, as the Go client computes it. */
export declare function digestOf(names: string[], condJSON: string): Promise<string>;
/** A synced scope: its rows and state as a subscribe/getSnapshot pair; R is the row type. */
export declare class Scope<R extends Row = Row> extends Subscribable<ScopeSnapshot<R>> {
    readonly resource: string;
    readonly conditions: Conditions | undefined;
    /** A scope of several resources: all of them, sorted. */
    readonly resources?: string[] | undefined;
    /** The rows of one of the scope's resources (a scope of several). */
    rowsOf(resource: string): Row[];
    /**
     * Subscribes the scope again from no cursor, on this same object: after
     * an error (access granted again), or to resync. A refused scope stays
     * refused until retried.
     */
    retry: () => void;
    /** Stops syncing the scope in this client (its stored copy stays). */
    close(): void;
}
