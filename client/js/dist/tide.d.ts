/** A row: a JSON object keyed by column name. */
export type Row = {
    [column: string]: unknown;
};
/** A scope condition: a scalar (equality) or {in: [scalars]}. */
export type Condition = string | number | boolean | {
    in: Array<string | number | boolean>;
};
export type Conditions = {
    [column: string]: Condition;
};
/** One change entry, as in a changes or ack frame. */
export interface Entry {
    op: "upsert" | "delete";
    key: string;
    row?: Row;
    origin?: string;
    resource?: string;
}
/** A decoded server frame (docs/protocol.md, "Server frames"). */
export type ServerFrame = {
    type: "welcome";
    build: string;
    limits: {
        [k: string]: number;
    };
} | {
    type: "changes";
    id?: string;
    cursor: string;
    entries: Entry[];
    more?: boolean;
} | {
    type: "caught-up";
    id: string;
    cursor: string;
} | {
    type: "reset";
    id?: string;
    reason: string;
} | {
    type: "error";
    id?: string;
    topic?: string;
    code: string;
    message: string;
} | {
    type: "update-available";
    build: string;
} | {
    type: "refresh-token";
    expires_in: number;
} | {
    type: "ack";
    key: string;
    cursor: string;
    entries: Entry[];
    replayed?: boolean;
} | {
    type: "reject";
    key: string;
    code: string;
    message: string;
} | TopicFrame;
/** A protocol violation by the server, or a frame this client cannot use. */
export declare class ProtocolError extends Error {
    name: string;
}
/** The server refused a mutation (reject frame). */
export declare class RejectError extends Error {
    readonly key: string;
    readonly code: string;
    name: string;
    constructor(key: string, code: string, message: string);
}
/** The mutation's strategy reported a conflict on a row; the server's row landed. */
export declare class ConflictError extends Error {
    readonly key: string;
    readonly resource: string;
    readonly rowKey: string;
    readonly cause: unknown;
    name: string;
    constructor(key: string, resource: string, rowKey: string, cause: unknown);
}
/**
 * decodeServerFrame parses one server frame (a WebSocket text message or a
 * polling response body) and checks the fields this client relies on.
 * Unknown fields are ignored; anything else malformed throws ProtocolError.
 */
export declare function decodeServerFrame(text: string): ServerFrame;
/**
 * newer reports whether cursor a is strictly ahead of cursor b (the stored
 * one), by the Go client's rules (client/cursor.go): "" is no cursor; an
 * unparsable cursor or another epoch means the server's word wins; else
 * positions compare, then a change cursor beats a snapshot cursor at its
 * position, and snapshot cursors compare by their key, bytewise.
 */
export declare function newer(a: string, b: string): boolean;
/** The canonical JSON of a scope's conditions ("" for none), as the Go client builds it. */
export declare function canonicalConditions(c: Conditions | undefined): string;
/** matchesScope reports whether a row satisfies the scope's conditions. */
export declare function matchesScope(conds: Conditions | undefined, row: Row): boolean;
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
/** A row change in the log: an upsert of row, or a delete (row null). */
export interface Op {
    resource: string;
    key: string;
    row: Row | null;
}
/** One mutation in the log (persisted in the offline queue). */
export interface LogItem {
    key: string;
    seq: number;
    resource: string;
    name: string;
    args: unknown;
    at: number;
    strategy: string;
    ops: Op[];
    acked: boolean;
    cursor: string;
    traceparent?: string;
    run?: Strategy;
}
/** The local copy of one scope. */
export interface ScopeCopy {
    digest: string;
    resource: string;
    /** A scope of several resources: all of them, sorted; rows are keyed resource + "\u0000" + key. */
    resources?: string[];
    conditions: Conditions | undefined;
    base: Map<string, Row>;
    cursor: string;
    view: Map<string, Row>;
    /** The server refused the scope and nothing was applied since: it holds no mutation back from settling. */
    refused?: boolean;
}
/**
 * Replica is the pure bookkeeping of client/replica.go: for each scope the
 * server's rows at its cursor (base) and the log of landed and pending
 * mutations on top; the view is the base with the log applied.
 */
export declare class Replica {
    scopes: Map<string, ScopeCopy>;
    log: LogItem[];
    private firstPending;
    /** The row (resource, key) holds on top of the bases and items; null if absent. */
    lookup(resource: string, key: string, items?: LogItem[]): Row | null;
    computeView(sc: ScopeCopy): Map<string, Row>;
    /** Recomputes the views (of the resources', or all) and returns the scopes whose view changed. */
    refresh(resources?: string[]): ScopeCopy[];
    /** Reconciles an ack (see client/replica.go); returns the item, or null for a repeated ack, and the conflicts. */
    ack(key: string, cursor: string, entries: Entry[]): {
        item: LogItem | null;
        known: boolean;
        conflicts: ConflictError[];
    };
    /** Takes key's pending write out of the log; null if unknown or landed. */
    reject(key: string): LogItem | null;
    /** Drops the landed items whose ack cursor every scope of their resources (but a refused one) has reached. */
    settle(): LogItem[];
}
/** applyBase returns base with one server batch applied (a new map); a scope of several resources keys rows by resource too. */
export declare function applyBase(base: Map<string, Row>, reset: boolean, entries: Entry[], sc?: {
    resources?: string[];
}): Map<string, Row>;
/** A scope's persisted record: its rows and cursor, written together. */
export interface ScopeRecord {
    digest: string;
    resource: string;
    resources?: string[];
    conditions?: Conditions;
    cursor: string;
    rows: {
        [key: string]: Row;
    };
}
/** Where the client keeps scopes, the offline queue and the device's origin. */
export interface Store {
    loadScope(digest: string): Promise<ScopeRecord | undefined>;
    /** Saves rec unless the stored cursor is ahead of it (another tab got further); reset forces it. */
    saveScope(rec: ScopeRecord, reset: boolean): Promise<void>;
    loadQueue(): Promise<LogItem[]>;
    putMutation(it: LogItem): Promise<void>;
    deleteMutation(key: string): Promise<void>;
    meta(name: string, make: () => string): Promise<string>;
    /** Every stored scope: the scopes the client follows, resumed on start. */
    listScopes?(): Promise<ScopeRecord[]>;
    deleteScope?(digest: string): Promise<void>;
}
/** memoryStore keeps everything in this page's memory. */
export declare function memoryStore(): Store;
/**
 * indexedDBStore keeps scopes, the queue and the origin in IndexedDB,
 * shared by the origin's tabs. Each scope is one record (rows and cursor)
 * written in one transaction that first checks no other tab stored a newer
 * cursor, so the stored cursor only moves forward (or back to none on reset).
 */
export declare function indexedDBStore(name?: string): Promise<Store>;
/** A scope's state: loading (nothing yet), cached (rows from the store), catching-up, live, error. */
export type ScopeState = "loading" | "cached" | "catching-up" | "live" | "error";
/** What a scope's subscribe/getSnapshot pair hands the UI. */
export interface ScopeSnapshot {
    readonly rows: readonly Row[];
    readonly byKey: ReadonlyMap<string, Row>;
    readonly state: ScopeState;
    readonly error?: {
        code: string;
        message: string;
    };
}
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
};
export interface Options {
    /** The middleware's prefix as a URL or path; default "/tide". */
    url?: string;
    /** The app's build id, sent in hello. */
    build?: string;
    /** A channel token provider, called for every hello and on refresh-token. */
    token?: () => string | Promise<string>;
    /** "indexeddb" (default when available), "memory", or a Store. */
    store?: "indexeddb" | "memory" | Store;
    /** The IndexedDB database name; default "tide". */
    dbName?: string;
    /** "auto" (WebSocket, polling when it is unavailable), "ws" or "poll". */
    transport?: "auto" | "ws" | "poll";
    /** How long polling waits between polls of a caught-up scope; default 2000 ms. */
    pollInterval?: number;
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
/** The local side of a mutation: read rows (pending writes applied) and write whole rows. */
export interface LocalTx {
    get(resource: string, key: string): Row | null;
    upsert(resource: string, key: string, row: Row): void;
    delete(resource: string, key: string): void;
}
export interface MutateOptions {
    local?: (tx: LocalTx) => void;
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
/** A synced scope: its rows and state as a subscribe/getSnapshot pair. */
export declare class Scope {
    private client;
    readonly resource: string;
    readonly conditions: Conditions | undefined;
    /** A scope of several resources: all of them, sorted. */
    readonly resources?: string[] | undefined;
    private listeners;
    private snap;
    constructor(client: Client, resource: string, conditions: Conditions | undefined, condJSON: string, 
    /** A scope of several resources: all of them, sorted. */
    resources?: string[] | undefined);
    /** The rows of one of the scope's resources (a scope of several). */
    rowsOf(resource: string): Row[];
    /** Calls fn with the snapshot now and after every change; returns the unsubscribe function. Works as a React useSyncExternalStore subscribe, and as a Svelte store. */
    subscribe: (fn: (s: ScopeSnapshot) => void) => (() => void);
    /** The current snapshot: the same object until the rows or state change. */
    getSnapshot: () => ScopeSnapshot;
    /** Stops syncing the scope in this client (its stored copy stays). */
    close(): void;
}
/** A status store: subscribe/getSnapshot like a Scope. */
declare class StatusStore {
    private listeners;
    snap: Status;
    subscribe: (fn: (s: Status) => void) => (() => void);
    getSnapshot: () => Status;
    set(s: Partial<Status>): void;
}
/** Creates a client; it connects at once and reconnects until close(). */
export declare function createClient(opts?: Options): Client;
export declare class Client {
    readonly status: StatusStore;
    private o;
    private base;
    private storeP;
    private store;
    private replica;
    private scopes;
    private handles;
    private origin;
    private ws;
    private conn;
    private welcomed;
    private attempt;
    private failedOpens;
    private subSeq;
    private seq;
    private chain;
    private timer;
    private closed;
    private lastToken;
    private refusedToken;
    private sent;
    private bc;
    private started;
    private forgotten;
    constructor(opts: Options);
    private wsCtor;
    private emit;
    private start;
    /**
     * Takes the shared queue's mutations this tab does not hold yet into its
     * log (at start: its own after a reload, other tabs' queued ones; later:
     * when another tab queues one). Every tab of the origin sends every queued
     * mutation: the server applies each key at most once and answers a repeat
     * with the recorded answer, so no tab owns the queue, none can lose a
     * mutation to another, and a closed tab's mutations are in flight from
     * the others already.
     */
    private loadQueue;
    /** Another tab's send of key was rejected: roll it back here too (it is out of the store). */
    private dropRejected;
    private insert;
    /**
     * Starts syncing a scope (the same scope twice returns the same Scope):
     * one resource, or several sharing the conditions' columns under one
     * cursor, whose transactions arrive whole. The scope is followed until
     * forget: a client started again on the same store resumes it.
     */
    scope(resource: string | string[], conditions?: Conditions): Scope;
    /** The scopes this client follows, those resumed from the store included. */
    followed(): Promise<Scope[]>;
    /** Stops following s for good: it is closed and its stored copy deleted. */
    forget(s: Scope): Promise<void>;
    /** Pending (unsettled) mutations. */
    get pendingKeys(): string[];
    private pending;
    /**
     * mutate asks the server to run the resource's mutator name with args.
     * local, if given, changes the local copy at once (optimistically); the
     * mutation is queued (persisted) and sent, and resent with its key until
     * answered.
     */
    mutate(resource: string, name: string, args?: unknown, mo?: MutateOptions): Mutation;
    /** Reconnects at once: after an error state (new credentials), or to skip a backoff wait. */
    reconnect(): void;
    /** Ends the connection and every timer; stored data stays. */
    close(): void;
    private changed;
    private updateStatus;
    private connect;
    private lastCode;
    private fail;
    private retry;
    private send;
    private handle;
    private applyFrame;
    private saveBase;
    private settle;
    private subscribeScope;
    private frameOf;
    /** Sends the unanswered mutations in seq order (after the subscriptions). */
    private flush;
    private onAck;
    private onReject;
    private onError;
    private post;
    private probePoll;
    private pollAll;
    private pollScope;
    private posting;
    private postAll;
}
/** One subscriber of a presence topic: a connection of a principal. */
export interface Member {
    id: string;
    principal: string;
    state?: unknown;
}
/** A topic's state for a UI: its presence list and the last refusal. */
export interface TopicSnapshot {
    members: Member[];
    error?: {
        code: string;
        message: string;
    };
}
/** A decoded channel frame (id is never set: frames name their topic). */
export type TopicFrame = {
    id?: undefined;
    topic: string;
} & ({
    type: "topic-subscribed";
    presence?: boolean;
} | {
    type: "message";
    data: unknown;
    from?: string;
} | {
    type: "presence";
    members: Member[];
} | {
    type: "presence-diff";
    joins: Member[];
    leaves: Member[];
});
/** A joined topic. Bind a UI with subscribe/getSnapshot, like Scope. */
export declare class Topic {
    private client;
    readonly name: string;
    private state;
    private members;
    private snap;
    private listeners;
    private handlers;
    private left;
    constructor(client: Client, name: string, state: unknown);
    /** Calls fn with every message of the topic; returns its remover. */
    onMessage(fn: (data: unknown, from: string) => void): () => void;
    subscribe(fn: (s: TopicSnapshot) => void): () => void;
    getSnapshot(): TopicSnapshot;
    /** Sends data to every subscriber; false when offline (nothing is queued). */
    publish(data: unknown): boolean;
    /** Replaces this client's presence state: sent now, and on every rejoin. */
    setState(state: unknown): void;
    leave(): void;
    private wire;
}
declare module "./tide" {
    interface Client {
        /** Joins a topic (or returns the one joined), with a presence state. */
        topic(name: string, opts?: {
            state?: unknown;
        }): Topic;
    }
}
export {};
