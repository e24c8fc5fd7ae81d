import type { Conditions, Row } from "./protocol.js";
import type { LogItem } from "./replica.js";
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
/**
 * Where the client keeps scopes, the offline queue and its meta data: the
 * device's origin, the principal the data belongs to, the server's frame
 * limit.
 */
export interface Store {
    loadScope(digest: string): Promise<ScopeRecord | undefined>;
    /** Saves rec unless the stored cursor is ahead of it (another tab got further); reset forces it. */
    saveScope(rec: ScopeRecord, reset: boolean): Promise<void>;
    loadQueue(): Promise<LogItem[]>;
    putMutation(it: LogItem): Promise<void>;
    deleteMutation(key: string): Promise<void>;
    /** The meta value name; if it is unset and make is given, make()'s value is stored and returned. */
    meta(name: string, make?: () => string): Promise<string | undefined>;
    setMeta(name: string, value: string): Promise<void>;
    /**
     * Deletes the scopes, the queue and the meta data but the device's
     * origin, in one step: the origin names the device, whoever signs in on
     * it, and every tab on the store must send the shared queue under it
     * (the server scopes a key to principal and origin: a tab that sent a
     * queued key under a new origin would have it run again).
     */
    clear(): Promise<void>;
    /** Every stored scope: the scopes the client follows, resumed on start. */
    listScopes?(): Promise<ScopeRecord[]>;
    deleteScope?(digest: string): Promise<void>;
}
/** The queued form of a log item: what is persisted (the in-memory fields left out). */
export declare const toStored: (it: LogItem) => LogItem;
/** memoryStore keeps everything in this page's memory. */
export declare function memoryStore(): Store;
/**
 * indexedDBStore keeps scopes, the queue and the meta data in IndexedDB,
 * shared by the origin's tabs. Each scope is one record (rows and cursor)
 * written in one transaction that first checks no other tab stored a newer
 * cursor, so the stored cursor only moves forward (or back to none on reset).
 */
export declare function indexedDBStore(name?: string): Promise<Store>;
