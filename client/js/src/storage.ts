// Where the client keeps its scopes (rows and cursor), the offline queue
// and its meta data (the device's origin): in memory, or in IndexedDB
// shared by the page's tabs.
import { newer } from "./cursor.js";
import type { Conditions, Row } from "./protocol.js";
import type { LogItem } from "./replica.js";

/** A scope's persisted record: its rows and cursor, written together. */
export interface ScopeRecord {
  digest: string;
  resource: string;
  resources?: string[];
  conditions?: Conditions;
  cursor: string;
  rows: { [key: string]: Row };
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
export const toStored = (it: LogItem): LogItem => {
  const { run_: _r, tries_: _t, ...rest } = it;
  return JSON.parse(JSON.stringify(rest)) as LogItem;
};

/** memoryStore keeps everything in this page's memory. */
export function memoryStore(): Store {
  const scopes = new Map<string, ScopeRecord>();
  const queue = new Map<string, LogItem>();
  const metas = new Map<string, string>();
  const copy = <T>(x: T): T => x && (JSON.parse(JSON.stringify(x)) as T);
  return {
    loadScope: async (d) => copy(scopes.get(d)),
    async saveScope(rec, reset) {
      const old = scopes.get(rec.digest);
      if (reset || !old || !newer(old.cursor, rec.cursor)) scopes.set(rec.digest, copy(rec));
    },
    listScopes: async () => copy([...scopes.values()]),
    deleteScope: async (d) => void scopes.delete(d),
    loadQueue: async () => copy([...queue.values()]),
    putMutation: async (it) => void queue.set(it.key, toStored(it)),
    deleteMutation: async (k) => void queue.delete(k),
    async meta(n, make) {
      if (make && !metas.has(n)) metas.set(n, make());
      return metas.get(n);
    },
    setMeta: async (n, v) => void metas.set(n, v),
    async clear() {
      const origin = metas.get("origin");
      for (const m of [scopes, queue, metas]) m.clear();
      if (origin !== undefined) metas.set("origin", origin);
    },
  };
}

const req = <T>(r: IDBRequest<T>) =>
  new Promise<T>((ok, fail) => {
    r.onsuccess = () => ok(r.result);
    r.onerror = () => fail(r.error);
  });
const done = (t: IDBTransaction) =>
  new Promise<void>((ok, fail) => {
    t.oncomplete = () => ok();
    t.onerror = t.onabort = () => fail(t.error ?? new Error("tide: IndexedDB aborted"));
  });

/**
 * indexedDBStore keeps scopes, the queue and the meta data in IndexedDB,
 * shared by the origin's tabs. Each scope is one record (rows and cursor)
 * written in one transaction that first checks no other tab stored a newer
 * cursor, so the stored cursor only moves forward (or back to none on reset).
 */
export async function indexedDBStore(name = "tide"): Promise<Store> {
  const open = indexedDB.open(name, 1);
  open.onupgradeneeded = () => {
    const db = open.result;
    db.createObjectStore("scopes", { keyPath: "digest" });
    db.createObjectStore("queue", { keyPath: "key" });
    db.createObjectStore("meta");
  };
  const db = await req(open);
  const tx = (s: string, mode: IDBTransactionMode = "readonly") => db.transaction(s, mode).objectStore(s);
  const write = (s: string, f: (os: IDBObjectStore) => void) => {
    const os = tx(s, "readwrite");
    f(os);
    return done(os.transaction);
  };
  return {
    loadScope: (d) => req(tx("scopes").get(d)) as Promise<ScopeRecord | undefined>,
    async saveScope(rec, reset) {
      const os = tx("scopes", "readwrite");
      const old = (await req(os.get(rec.digest))) as ScopeRecord | undefined;
      if (reset || !old || !newer(old.cursor, rec.cursor)) os.put(rec);
      await done(os.transaction);
    },
    loadQueue: () => req(tx("queue").getAll()) as Promise<LogItem[]>,
    listScopes: () => req(tx("scopes").getAll()) as Promise<ScopeRecord[]>,
    deleteScope: (d) => write("scopes", (os) => os.delete(d)),
    putMutation: (it) => write("queue", (os) => os.put(toStored(it))),
    deleteMutation: (k) => write("queue", (os) => os.delete(k)),
    async meta(n, make) {
      const os = tx("meta", "readwrite");
      let v = (await req(os.get(n))) as string | undefined;
      if (v === undefined && make) os.put((v = make()), n);
      await done(os.transaction);
      return v;
    },
    setMeta: (n, v) => write("meta", (os) => os.put(v, n)),
    async clear() {
      const t = db.transaction(["scopes", "queue", "meta"], "readwrite");
      const origin = await req(t.objectStore("meta").get("origin"));
      for (const s of ["scopes", "queue", "meta"]) t.objectStore(s).clear();
      if (origin !== undefined) t.objectStore("meta").put(origin, "origin");
      await done(t);
    },
  };
}
