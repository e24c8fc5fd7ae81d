import { type Entry, type Row } from "./protocol.js";
import { type LogItem, type Op, type Replica, type Strategy } from "./replica.js";
/** The local side of a mutation: read rows (pending writes applied) and write whole rows. */
export interface LocalTx {
    get(resource: string, key: string): Row | null;
    upsert(resource: string, key: string, row: Row): void;
    delete(resource: string, key: string): void;
}
/** How a mutation runs. */
export interface MutateOptions {
    /** Changes the local copy at once (optimistically). */
    local?: (tx: LocalTx) => void;
    /** Which row lands when the server's answer meets a local write; default "server-wins". */
    strategy?: Strategy;
    /** The idempotency key; default a random 128-bit hex string. */
    key?: string;
    /**
     * The W3C trace context (a `traceparent` header value, at most 128 bytes,
     * no control characters) of the app's span for this mutation: a tracing
     * server makes the mutation's span its child. Kept with the queued
     * mutation and sent with every attempt.
     */
    traceparent?: string;
}
/** An ack, as the mutation's result. */
export interface Result {
    key: string;
    cursor: string;
    entries: Entry[];
    replayed: boolean;
}
/** A mutation's handle. */
export interface Mutation {
    readonly key: string;
    /** Resolves once the mutation is saved in the offline queue. */
    readonly queued: Promise<void>;
    /** The ack, or a RejectError / ConflictError. */
    readonly result: Promise<Result>;
    /** Resolves when the subscriptions have reached the ack's cursor (or after a reject). */
    readonly settled: Promise<void>;
}
export type Deferred<T> = {
    p: Promise<T>;
    ok: (v: T) => void;
    fail: (e: unknown) => void;
};
export declare function deferred<T>(): Deferred<T>;
/** What the client keeps for a pending mutation: its result and settled promises. */
export type Handle = {
    r_: Deferred<Result>;
    s_: Deferred<void>;
};
export declare const handle: () => Handle;
/** Runs a mutation's local function against the replica; returns its row ops. */
export declare function localOps(r: Replica, local: ((tx: LocalTx) => void) | undefined): Op[];
/** The mutate frame of a queued mutation: key right after type, so a server can read it from a frame's head. */
export declare const frameOf: (it: LogItem) => {
    type: string;
    key: string;
    seq: number;
    resource: string;
    name: string;
    args: {};
    at: number;
    traceparent: string | undefined;
};
