import { ConflictError } from "./errors.js";
import { type Conditions, type Entry, type Row } from "./protocol.js";
/**
 * A strategy decides which row lands when the server acknowledges a
 * mutation that changed the row locally: "server-wins" (the default),
 * {lastWriteWins: field} (the local row stays only if its numeric clock
 * field is strictly newer), or {merge: (local, base, server) => row | null}
 * (throw to report a conflict: the server's row then lands). Any of local,
 * base and server is null when the row is absent.
 */
export type Strategy = "server-wins" | {
    lastWriteWins: string;
} | {
    merge: (local: Row | null, base: Row | null, server: Row | null) => Row | null;
};
/** The name a strategy is persisted under (a merge is not persisted: "custom"). */
export declare const strategyName: (s: Strategy) => string;
/** A row change in the log: an upsert of row, or a delete (row null). */
export interface Op {
    resource: string;
    key: string;
    row: Row | null;
}
/** One mutation in the log, as persisted in the offline queue. */
export interface LogItem {
    key: string;
    seq: number;
    resource: string;
    name: string;
    args: unknown;
    at: number;
    /** The strategy's persisted name. */
    strategy: string;
    ops: Op[];
    acked: boolean;
    cursor: string;
    /** The app's span, sent with the mutation. */
    traceparent?: string;
}
/** The local copy of one scope. */
export interface ScopeCopy {
    digest: string;
    resource: string;
    /** A scope of several resources: all of them, sorted; rows are keyed resource + "\u0000" + key. */
    resources?: string[] | undefined;
    conditions: Conditions | undefined;
    base_: Map<string, Row>;
    cursor: string;
    view_: Map<string, Row>;
    /** The server refused the scope and nothing was applied since: it holds no mutation back from settling. */
    refused_?: boolean;
}
/** Whether sc follows resource r, and the key of r's row k in sc's rows. */
export declare const covers: (sc: ScopeCopy, r: string) => boolean;
export declare const rowKey: (sc: {
    resources?: string[] | undefined;
}, r: string, k: string) => string;
/** The row the last op of ops on (resource, key) leaves: undefined if none. */
export declare function lastOp(ops: Op[], resource: string, key: string): Row | null | undefined;
/** The scopes' server rows and the mutation log on top (client/replica.go). */
export declare class Replica {
    scopes_: Map<string, ScopeCopy>;
    log_: LogItem[];
    /** The row (resource, key) holds on top of the bases and items; null if absent. */
    lookup_(resource: string, key: string, items?: LogItem[]): Row | null;
    computeView_(sc: ScopeCopy): Map<string, Row>;
    /** Recomputes the views (of the resources', or all) and returns the scopes whose view changed. */
    refresh_(resources?: string[]): ScopeCopy[];
    /** Reconciles an ack (see client/replica.go); returns the item, or null for a repeated ack, and the conflicts. */
    ack_(key: string, cursor: string, entries: Entry[]): {
        item: LogItem | null;
        conflicts: ConflictError[];
    };
    /** Takes key's pending write out of the log; null if unknown or landed. */
    reject_(key: string): LogItem | null;
    /** Drops the landed items whose ack cursor every scope of their resources (but a refused one) has reached. */
    settle_(): LogItem[];
}
/** applyBase returns base with one server batch applied (a new map); a scope of several resources keys rows by resource too. */
export declare function applyBase(base: Map<string, Row>, reset: boolean, entries: Entry[], sc?: {
    resources?: string[] | undefined;
}): Map<string, Row>;
