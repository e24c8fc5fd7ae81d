import { ConflictError, RejectError } from "./errors.js";
import { type ServerFrame } from "./protocol.js";
import { type Store } from "./storage.js";
import { Scope } from "./scope.js";
import { type Mutation } from "./queue.js";
import { Topic } from "./channels.js";
import { Subscribable } from "./subscribable.js";
import type { ArgsOf, ConditionsOf, MessageOf, MutateRest, MutatorName, PresenceOf, ResourceName, RowOf, TideSchema, TopicName } from "./schema.js";
/** The connection's status for the UI. */
export interface Status {
    readonly state: "connecting" | "catching-up" | "live" | "offline" | "error";
    readonly pending: number;
    readonly code?: string;
    readonly message?: string;
    readonly updateAvailable?: string;
    readonly transport: "ws" | "poll";
}
/** Events for logs and tests: every frame in and out, errors, state changes. */
export type ClientEvent = {
    type: "frame-in";
    frame: ServerFrame;
} | {
    type: "frame-out";
    frame: {
        [k: string]: unknown;
    };
} | {
    type: "error";
    error: Error;
} | {
    type: "conflict";
    error: ConflictError;
} | {
    type: "update-available";
    build: string;
} | {
    type: "close";
    code: number;
    reason: string;
}
/** The store held another principal's data: it was discarded (its queued mutations rejected with code principal_changed). */
 | {
    type: "principal-changed";
    from: string;
    to: string;
}
/** A queued mutation the server closed 5 connections on without answering was settled as rejected (code undeliverable). */
 | {
    type: "undeliverable";
    error: RejectError;
};
/** createClient's options. */
export interface Options {
    /** The middleware's prefix as a URL or path; default "/tide". */
    url?: string;
    /** The app's build id, sent in hello. */
    build?: string;
    /** A channel token provider, called for every hello and on refresh-token. */
    token?: () => string | Promise<string>;
    /**
     * The app's key for the signed-in user: the client keeps this user's data
     * in its own IndexedDB database (`<dbName>:<user>`) and shows its cached
     * rows before the socket opens. Without it, stored rows are shown and the
     * queue is sent only once the server confirmed whose store it is.
     */
    user?: string;
    /** "indexeddb" (default when available), "memory", or a Store. */
    store?: "indexeddb" | "memory" | Store;
    /** The IndexedDB database name; default "tide". */
    dbName?: string;
    /** The device's origin id; default one made once per store and kept in it. */
    origin?: string;
    /** "auto" (WebSocket, polling when it is unavailable), "ws" or "poll". */
    transport?: "auto" | "ws" | "poll";
    /** How long polling waits between polls of a caught-up scope; default 2000 ms. */
    pollInterval?: number;
    /** The reconnect backoff's bounds in ms: a random wait in [0, min(max, min·2ⁿ)); default 100 and 30000. */
    minBackoff?: number;
    maxBackoff?: number;
    onEvent?: (e: ClientEvent) => void;
    /** A WebSocket constructor (tests); default globalThis.WebSocket. */
    WebSocket?: typeof WebSocket;
    /** A fetch function (tests); default globalThis.fetch. */
    fetch?: typeof fetch;
    /** false: do not resume the stored (followed) scopes on start. */
    resume?: boolean;
}
/**
 * Creates a client; it connects at once and reconnects until close(). With
 * the app's generated schema, createClient<Schema>(), scope, mutate and
 * topic check resource, column, mutator and topic names and types at
 * compile time (docs/types.md).
 */
export declare function createClient<S extends TideSchema = TideSchema>(opts?: Options): Client<S>;
/** A tide client: scopes, mutations and topics over one connection; S is the app's schema (TideSchema: any). */
export declare class Client<S extends TideSchema = TideSchema> {
    /** The connection's status as a subscribe/getSnapshot pair. */
    readonly status: Subscribable<Status>;
    /**
     * Wipes the local data of the current store: rows, cursors, queue (each
     * pending mutation is rejected with code "cleared") and meta but the
     * device's origin, here and in the other tabs on the store; every scope is emptied and resubscribed.
     * The logout call: the next session's welcome claims the empty store.
     */
    clearLocalData(): Promise<void>;
    /**
     * Starts syncing a scope (the same scope twice returns the same Scope):
     * one resource, or several sharing the conditions' columns under one
     * cursor, whose transactions arrive whole. The scope is followed until
     * forget: a client started again on the same store resumes it.
     */
    scope<R extends ResourceName<S>>(resource: R | R[], conditions?: ConditionsOf<S, R>): Scope<RowOf<S, R>>;
    /** The scopes this client follows, once the stored ones are resumed (without the user option: once the server confirmed whose store it is). */
    followed(): Promise<Scope[]>;
    /** Stops following s for good: it is closed and its stored copy deleted. */
    forget(s: Scope): Promise<void>;
    /** Joins a topic (or returns the one joined), with a presence state. */
    topic<N extends TopicName<S>>(name: N, opts?: {
        state?: PresenceOf<S, N>;
    }): Topic<MessageOf<S, N>, PresenceOf<S, N>>;
    /** Pending (unsettled) mutations, oldest first. */
    get pendingKeys(): string[];
    /**
     * mutate asks the server to run the resource's mutator name with args (a
     * JSON object). local, if given, changes the local copy at once
     * (optimistically); the mutation is queued (persisted) and sent, and
     * resent with its key until answered. A mutation that can never be sent
     * (args that are not a JSON object: invalid_args; a frame over the
     * server's max_frame_bytes: frame_too_large) is refused at once: its
     * result rejects with a RejectError, nothing is queued or applied.
     */
    mutate<R extends ResourceName<S>, M extends MutatorName<S, R>>(resource: R, name: M, ...rest: MutateRest<ArgsOf<S, R, M>>): Mutation;
    /** Reconnects at once: after an error state (new credentials), or to skip a backoff wait. */
    reconnect(): void;
    /** Ends the connection and every timer; stored data stays. */
    close(): void;
}
