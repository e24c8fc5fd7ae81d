// tide's browser client: the wire protocol of docs/protocol.md with the
// guarantees of the Go client (client/doc.go). Zero runtime dependencies;
// compiled to one ES module (dist/tide.js) that tide's middleware serves at
// <prefix>/client.js.

/** A row: a JSON object keyed by column name. */
export type Row = { [column: string]: unknown };
/** A scope condition: a scalar (equality) or {in: [scalars]}. */
export type Condition = string | number | boolean | { in: Array<string | number | boolean> };
export type Conditions = { [column: string]: Condition };

/** One change entry, as in a changes or ack frame. */
export interface Entry {
  op: "upsert" | "delete";
  key: string;
  row?: Row;
  origin?: string;
  resource?: string;
}

/** A decoded server frame (docs/protocol.md, "Server frames"). */
export type ServerFrame =
  | { type: "welcome"; build: string; limits: { [k: string]: number } }
  | { type: "changes"; id?: string; cursor: string; entries: Entry[]; more?: boolean }
  | { type: "caught-up"; id: string; cursor: string }
  | { type: "reset"; id?: string; reason: string }
  | { type: "error"; id?: string; topic?: string; code: string; message: string }
  | { type: "update-available"; build: string }
  | { type: "refresh-token"; expires_in: number }
  | { type: "ack"; key: string; cursor: string; entries: Entry[]; replayed?: boolean }
  | { type: "reject"; key: string; code: string; message: string }
  | TopicFrame; // app channels: see the section at the end of this file

/** A protocol violation by the server, or a frame this client cannot use. */
export class ProtocolError extends Error {
  override name = "ProtocolError";
}

/** The server refused a mutation (reject frame). */
export class RejectError extends Error {
  override name = "RejectError";
  constructor(readonly key: string, readonly code: string, message: string) {
    super(`tide: mutation ${key} rejected: ${code}${message ? ": " + message : ""}`);
  }
}

/** The mutation's strategy reported a conflict on a row; the server's row landed. */
export class ConflictError extends Error {
  override name = "ConflictError";
  constructor(readonly key: string, readonly resource: string, readonly rowKey: string, readonly cause: unknown) {
    super(`tide: mutation ${key}: conflict on ${resource} ${JSON.stringify(rowKey)}: ${String(cause)}`);
  }
}

const isObj = (x: unknown): x is { [k: string]: unknown } => typeof x === "object" && x !== null && !Array.isArray(x);
const str = (f: { [k: string]: unknown }, k: string, opt = false): string => {
  const v = f[k];
  if (v === undefined && opt) return "";
  if (typeof v !== "string") throw new ProtocolError(`${String(f.type)}: "${k}" is not a string`);
  return v;
};

function decodeEntries(f: { [k: string]: unknown }): Entry[] {
  const list = f.entries === undefined || f.entries === null ? [] : f.entries;
  if (!Array.isArray(list)) throw new ProtocolError(`${String(f.type)}: "entries" is not an array`);
  return list.map((e): Entry => {
    if (!isObj(e)) throw new ProtocolError("an entry is not an object");
    const op = e.op;
    const key = str(e, "key");
    const out: Entry = { op: op as Entry["op"], key };
    if (op === "upsert") {
      if (!isObj(e.row)) throw new ProtocolError(`upsert of ${key}: "row" is not an object`);
      out.row = e.row;
    } else if (op !== "delete") throw new ProtocolError(`entry ${key}: op ${JSON.stringify(op)}`);
    if (e.origin !== undefined) out.origin = str(e, "origin");
    if (e.resource !== undefined) out.resource = str(e, "resource");
    return out;
  });
}

/**
 * decodeServerFrame parses one server frame (a WebSocket text message or a
 * polling response body) and checks the fields this client relies on.
 * Unknown fields are ignored; anything else malformed throws ProtocolError.
 */
export function decodeServerFrame(text: string): ServerFrame {
  let f: unknown;
  try {
    f = JSON.parse(text);
  } catch {
    throw new ProtocolError("a frame is not JSON");
  }
  if (!isObj(f)) throw new ProtocolError("a frame is not a JSON object");
  if (f.v !== 1) throw new ProtocolError(`unsupported protocol version ${JSON.stringify(f.v)}`);
  const type = f.type;
  switch (type) {
    case "welcome":
      return { type, build: str(f, "build", true), limits: isObj(f.limits) ? (f.limits as { [k: string]: number }) : {} };
    case "changes": {
      const out: ServerFrame = { type, cursor: str(f, "cursor"), entries: decodeEntries(f) };
      if (f.id !== undefined) out.id = str(f, "id");
      if (f.more === true) out.more = true;
      return out;
    }
    case "caught-up":
      return { type, id: str(f, "id"), cursor: str(f, "cursor") };
    case "reset": {
      const out: ServerFrame = { type, reason: str(f, "reason", true) };
      if (f.id !== undefined) out.id = str(f, "id");
      return out;
    }
    case "error": {
      const out: ServerFrame = { type, code: str(f, "code"), message: str(f, "message", true) };
      if (f.id !== undefined) out.id = str(f, "id");
      if (f.topic !== undefined) out.topic = str(f, "topic");
      return out;
    }
    case "update-available":
      return { type, build: str(f, "build", true) };
    case "refresh-token":
      if (typeof f.expires_in !== "number") throw new ProtocolError(`refresh-token: "expires_in" is not a number`);
      return { type, expires_in: f.expires_in };
    case "ack": {
      const out: ServerFrame = { type, key: str(f, "key"), cursor: str(f, "cursor", true), entries: decodeEntries(f) };
      if (f.replayed === true) out.replayed = true;
      return out;
    }
    case "reject":
      return { type, key: str(f, "key"), code: str(f, "code"), message: str(f, "message", true) };
  }
  if (topicFrameTypes.includes(type as string)) return decodeTopicFrame(f);
  throw new ProtocolError(`unknown frame type ${JSON.stringify(type)}`);
}

// ---- cursors ----

type ParsedCursor = { epoch: string; pos: bigint; snap: boolean; after: string };

function b64urlBytes(s: string): string | null {
  if (!/^[A-Za-z0-9_-]*$/.test(s) || s.length % 4 === 1) return null;
  try {
    return atob(s.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((s.length + 3) % 4));
  } catch {
    return null;
  }
}

function parseCursor(s: string): ParsedCursor | null {
  if (s === "" || s.length > 1024) return null;
  const p = s.split(".");
  let snap = false;
  let after = "";
  if (p[0] === "1s" && p.length === 4) {
    const k = b64urlBytes(p[3]!);
    if (k === null) return null;
    snap = true;
    after = k;
  } else if (!(p[0] === "1" && p.length === 3)) return null;
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(p[1]!) || !/^(0|[1-9][0-9]*)$/.test(p[2]!)) return null;
  return { epoch: p[1]!, pos: BigInt(p[2]!), snap, after };
}

/**
 * newer reports whether cursor a is strictly ahead of cursor b (the stored
 * one), by the Go client's rules (client/cursor.go): "" is no cursor; an
 * unparsable cursor or another epoch means the server's word wins; else
 * positions compare, then a change cursor beats a snapshot cursor at its
 * position, and snapshot cursors compare by their key, bytewise.
 */
export function newer(a: string, b: string): boolean {
  if (a === "" || a === b) return false;
  if (b === "") return true;
  const ca = parseCursor(a);
  const cb = parseCursor(b);
  if (!ca || !cb || ca.epoch !== cb.epoch) return true;
  if (ca.pos !== cb.pos) return ca.pos > cb.pos;
  if (ca.snap && cb.snap) return ca.after > cb.after; // latin1 strings of bytes: bytewise
  return cb.snap && !ca.snap;
}

// ---- scopes ----

function scalarJSON(x: unknown): string {
  if (typeof x === "string" || typeof x === "boolean") return JSON.stringify(x);
  if (typeof x === "number" && Number.isInteger(x)) return String(x);
  throw new Error(`${JSON.stringify(x)} is not a scope condition value (string, integer or boolean)`);
}

/** The canonical JSON of a scope's conditions ("" for none), as the Go client builds it. */
export function canonicalConditions(c: Conditions | undefined): string {
  const cols = Object.keys(c ?? {}).sort();
  if (cols.length === 0) return "";
  const parts = cols.map((col) => {
    const v = c![col];
    let j: string;
    if (isObj(v)) {
      const list = (v as { in?: unknown }).in;
      if (!Array.isArray(list) || list.length === 0 || Object.keys(v).length !== 1) throw new Error(`condition ${col}: a scalar or {in: [scalars]} with at least one value`);
      const vals = [...new Set(list.map(scalarJSON))].sort();
      j = vals.length === 1 ? vals[0]! : `{"in":[${vals.join(",")}]}`;
    } else j = scalarJSON(v);
    return JSON.stringify(col) + ":" + j;
  });
  return "{" + parts.join(",") + "}";
}

const isInteger = (s: string) => /^-?[0-9]+$/.test(s);
function scalarText(v: unknown): string {
  if (typeof v === "string") return isInteger(v) ? v : JSON.stringify(v);
  if (typeof v === "boolean") return String(v);
  if (typeof v === "number" && Number.isInteger(v)) return String(v);
  return "";
}

/** matchesScope reports whether a row satisfies the scope's conditions. */
export function matchesScope(conds: Conditions | undefined, row: Row): boolean {
  for (const [col, cond] of Object.entries(conds ?? {})) {
    const got = scalarText(row[col]);
    if (got === "") return false;
    const list = isObj(cond) ? (cond as { in: unknown[] }).in : [cond];
    if (!list.some((c) => scalarText(c) === got)) return false;
  }
  return true;
}

// ---- strategies ----

/**
 * A strategy decides which row lands when the server acknowledges a
 * mutation that changed the row locally: "server-wins" (the default),
 * {lastWriteWins: field} (the local row stays only if its numeric clock
 * field is strictly newer), or {merge: (local, base, server) => row | null}
 * (throw to report a conflict: the server's row then lands). Any of local,
 * base and server is null when the row is absent.
 */
export type Strategy =
  | "server-wins"
  | { lastWriteWins: string }
  | { merge: (local: Row | null, base: Row | null, server: Row | null) => Row | null };

function clockOf(row: Row, field: string): number | undefined {
  const v = row[field];
  return typeof v === "number" ? v : undefined;
}

function resolve(s: Strategy, local: Row | null, base: Row | null, server: Row | null): Row | null {
  if (s === "server-wins") return server;
  if ("lastWriteWins" in s) {
    if (local === null || server === null) return server;
    const f = s.lastWriteWins || "updatedAt";
    const lc = clockOf(local, f);
    const sc = clockOf(server, f);
    return lc !== undefined && (sc === undefined || lc > sc) ? local : server;
  }
  const out = s.merge(local, base, server);
  if (out !== null && !isObj(out)) throw new Error("a merge returns a row (an object) or null");
  return out;
}

const strategyName = (s: Strategy): string =>
  s === "server-wins" ? s : "lastWriteWins" in s ? "last-write-wins:" + (s.lastWriteWins || "updatedAt") : "custom";
const strategyFromName = (n: string): Strategy =>
  n.startsWith("last-write-wins:") ? { lastWriteWins: n.slice(16) } : "server-wins";

// ---- the replica: server rows per scope plus the mutation log ----

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
  strategy: string; // persisted name
  ops: Op[];
  acked: boolean;
  cursor: string;
  traceparent?: string; // the app's span, sent with the mutation
  run?: Strategy; // in memory: the strategy (a merge is not persisted)
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

/** Whether sc follows resource r, and the key of r's row k in sc's rows. */
const covers = (sc: ScopeCopy, r: string) => (sc.resources ? sc.resources.includes(r) : sc.resource === r);
const rowKey = (sc: { resources?: string[] }, r: string, k: string) => (sc.resources ? r + "\u0000" + k : k);

function rowsEqual(a: Map<string, Row>, b: Map<string, Row>): boolean {
  if (a === b) return true;
  if (a.size !== b.size) return false;
  for (const [k, r] of a) {
    const o = b.get(k);
    if (o === undefined || (o !== r && JSON.stringify(o) !== JSON.stringify(r))) return false;
  }
  return true;
}

/**
 * Replica is the pure bookkeeping of client/replica.go: for each scope the
 * server's rows at its cursor (base) and the log of landed and pending
 * mutations on top; the view is the base with the log applied.
 */
export class Replica {
  scopes = new Map<string, ScopeCopy>();
  log: LogItem[] = [];

  private firstPending(): number {
    const i = this.log.findIndex((it) => !it.acked);
    return i < 0 ? this.log.length : i;
  }

  /** The row (resource, key) holds on top of the bases and items; null if absent. */
  lookup(resource: string, key: string, items: LogItem[] = this.log): Row | null {
    let v: Row | null = null;
    for (const d of [...this.scopes.keys()].sort()) {
      const sc = this.scopes.get(d)!;
      if (covers(sc, resource) && sc.base.has(rowKey(sc, resource, key))) {
        v = sc.base.get(rowKey(sc, resource, key))!;
        break;
      }
    }
    for (const it of items) for (const op of it.ops) if (op.resource === resource && op.key === key) v = op.row;
    return v;
  }

  computeView(sc: ScopeCopy): Map<string, Row> {
    let view: Map<string, Row> | null = null;
    for (const it of this.log)
      for (const op of it.ops) {
        if (!covers(sc, op.resource)) continue;
        view ??= new Map(sc.base);
        const k = rowKey(sc, op.resource, op.key);
        if (op.row !== null && matchesScope(sc.conditions, op.row)) view.set(k, op.row);
        else view.delete(k);
      }
    return view ?? sc.base;
  }

  /** Recomputes the views (of the resources', or all) and returns the scopes whose view changed. */
  refresh(resources?: string[]): ScopeCopy[] {
    const changed: ScopeCopy[] = [];
    for (const d of [...this.scopes.keys()].sort()) {
      const sc = this.scopes.get(d)!;
      if (resources && !resources.some((r) => covers(sc, r))) continue;
      const v = this.computeView(sc);
      const same = rowsEqual(sc.view, v);
      sc.view = v;
      if (!same) changed.push(sc);
    }
    return changed;
  }

  /** Reconciles an ack (see client/replica.go); returns the item, or null for a repeated ack, and the conflicts. */
  ack(key: string, cursor: string, entries: Entry[]): { item: LogItem | null; known: boolean; conflicts: ConflictError[] } {
    const i = this.log.findIndex((it) => it.key === key);
    if (i >= 0 && this.log[i]!.acked) return { item: null, known: true, conflicts: [] };
    let it: LogItem;
    let prefix: LogItem[];
    let rest: LogItem[];
    const known = i >= 0;
    if (known) {
      it = this.log[i]!;
      prefix = this.log.slice(0, i);
      rest = this.log.slice(i + 1);
    } else {
      it = { key, seq: 0, resource: "", name: "", args: {}, at: 0, strategy: "server-wins", ops: [], acked: false, cursor: "" };
      const p = this.firstPending();
      prefix = this.log.slice(0, p);
      rest = this.log.slice(p);
    }
    const landedRest = rest.filter((x) => x.acked);
    const pendingRest = rest.filter((x) => !x.acked);
    const beneath = [...prefix, ...landedRest];
    let pos = beneath.length;
    while (pos > 0 && beneath[pos - 1]!.acked && newer(beneath[pos - 1]!.cursor, cursor)) pos--;
    const under = beneath.slice(0, pos);
    const strategy = it.run ?? strategyFromName(it.strategy);
    const conflicts: ConflictError[] = [];
    const landed: Op[] = [];
    const named = new Set<string>();
    for (const e of entries) {
      const resource = e.resource || it.resource;
      named.add(resource + "\u0000" + e.key);
      const server = e.op === "delete" ? null : (e.row ?? null);
      let row = server;
      const local = lastOp(it.ops, resource, e.key);
      if (local !== undefined) {
        const base = this.lookup(resource, e.key, under);
        try {
          row = resolve(strategy, local, base, server);
        } catch (err) {
          conflicts.push(new ConflictError(key, resource, e.key, err));
          row = server;
        }
      }
      landed.push({ resource, key: e.key, row });
    }
    const kept = it.ops.filter((op) => !named.has(op.resource + "\u0000" + op.key));
    it.ops = [...kept, ...landed];
    it.acked = true;
    it.cursor = cursor;
    this.log = [...beneath.slice(0, pos), it, ...beneath.slice(pos), ...pendingRest];
    return { item: it, known, conflicts };
  }

  /** Takes key's pending write out of the log; null if unknown or landed. */
  reject(key: string): LogItem | null {
    const i = this.log.findIndex((it) => it.key === key);
    if (i < 0 || this.log[i]!.acked) return null;
    return this.log.splice(i, 1)[0]!;
  }

  /** Drops the landed items whose ack cursor every scope of their resources (but a refused one) has reached. */
  settle(): LogItem[] {
    const done: LogItem[] = [];
    this.log = this.log.filter((it) => {
      if (!it.acked) return true;
      const res = new Set([it.resource, ...it.ops.map((o) => o.resource)].filter((r) => r !== ""));
      for (const sc of this.scopes.values()) if (!sc.refused && [...res].some((r) => covers(sc, r)) && newer(it.cursor, sc.cursor)) return true;
      done.push(it);
      return false;
    });
    return done;
  }
}

function lastOp(ops: Op[], resource: string, key: string): Row | null | undefined {
  for (let i = ops.length - 1; i >= 0; i--) if (ops[i]!.resource === resource && ops[i]!.key === key) return ops[i]!.row;
  return undefined;
}

/** applyBase returns base with one server batch applied (a new map); a scope of several resources keys rows by resource too. */
export function applyBase(base: Map<string, Row>, reset: boolean, entries: Entry[], sc: { resources?: string[] } = {}): Map<string, Row> {
  const next = reset ? new Map<string, Row>() : new Map(base);
  for (const e of entries) {
    const k = rowKey(sc, e.resource ?? "", e.key);
    if (e.op === "upsert") next.set(k, e.row!);
    else next.delete(k);
  }
  return next;
}

// ---- storage ----

/** A scope's persisted record: its rows and cursor, written together. */
export interface ScopeRecord {
  digest: string;
  resource: string;
  resources?: string[];
  conditions?: Conditions;
  cursor: string;
  rows: { [key: string]: Row };
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

const toStored = (it: LogItem): LogItem => {
  const { run: _run, ...rest } = it;
  return JSON.parse(JSON.stringify(rest)) as LogItem;
};

/** memoryStore keeps everything in this page's memory. */
export function memoryStore(): Store {
  const scopes = new Map<string, string>();
  const queue = new Map<string, string>();
  const metas = new Map<string, string>();
  return {
    async loadScope(d) {
      const s = scopes.get(d);
      return s === undefined ? undefined : (JSON.parse(s) as ScopeRecord);
    },
    async saveScope(rec, reset) {
      const old = scopes.get(rec.digest);
      if (!reset && old !== undefined && newer((JSON.parse(old) as ScopeRecord).cursor, rec.cursor)) return;
      scopes.set(rec.digest, JSON.stringify(rec));
    },
    listScopes: async () => [...scopes.values()].map((s) => JSON.parse(s) as ScopeRecord),
    deleteScope: async (d) => void scopes.delete(d),
    async loadQueue() {
      return [...queue.values()].map((s) => JSON.parse(s) as LogItem);
    },
    async putMutation(it) {
      queue.set(it.key, JSON.stringify(toStored(it)));
    },
    async deleteMutation(k) {
      queue.delete(k);
    },
    async meta(n, make) {
      if (!metas.has(n)) metas.set(n, make());
      return metas.get(n)!;
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
    t.onerror = t.onabort = () => fail(t.error ?? new Error("tide: IndexedDB transaction aborted"));
  });

/**
 * indexedDBStore keeps scopes, the queue and the origin in IndexedDB,
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
    async deleteScope(d) {
      const os = tx("scopes", "readwrite");
      os.delete(d);
      await done(os.transaction);
    },
    async putMutation(it) {
      const os = tx("queue", "readwrite");
      os.put(toStored(it));
      await done(os.transaction);
    },
    async deleteMutation(k) {
      const os = tx("queue", "readwrite");
      os.delete(k);
      await done(os.transaction);
    },
    async meta(n, make) {
      const os = tx("meta", "readwrite");
      let v = (await req(os.get(n))) as string | undefined;
      if (v === undefined) os.put((v = make()), n);
      await done(os.transaction);
      return v;
    },
  };
}

// ---- the client ----

/** A scope's state: loading (nothing yet), cached (rows from the store), catching-up, live, error. */
export type ScopeState = "loading" | "cached" | "catching-up" | "live" | "error";
/** What a scope's subscribe/getSnapshot pair hands the UI. */
export interface ScopeSnapshot {
  readonly rows: readonly Row[];
  readonly byKey: ReadonlyMap<string, Row>;
  readonly state: ScopeState;
  readonly error?: { code: string; message: string };
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
export type ClientEvent =
  | { type: "frame-in"; frame: ServerFrame }
  | { type: "frame-out"; frame: { [k: string]: unknown } }
  | { type: "error"; error: Error }
  | { type: "conflict"; error: ConflictError }
  | { type: "update-available"; build: string }
  | { type: "close"; code: number; reason: string };

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

type Handle = { result: Deferred<Result>; settled: Deferred<void>; conflict?: ConflictError };
type Deferred<T> = { p: Promise<T>; ok: (v: T) => void; fail: (e: unknown) => void };
function deferred<T>(): Deferred<T> {
  let ok!: (v: T) => void, fail!: (e: unknown) => void;
  const p = new Promise<T>((a, b) => ((ok = a), (fail = b)));
  p.catch(() => {});
  return { p, ok, fail };
}

const randomHex = () => Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");

async function digestOf(names: string[], condJSON: string): Promise<string> {
  const head = names.length > 1 ? "tide-scopes-v1\u0000" + names.join("\u0000") : "tide-scope-v1\u0000" + names[0];
  const data = new TextEncoder().encode(head + "\u0000" + (condJSON || "{}"));
  const h = new Uint8Array(await crypto.subtle.digest("SHA-256", data));
  return Array.from(h, (b) => b.toString(16).padStart(2, "0")).join("");
}

const names = (s: Scope) => (s.resources ? { resources: s.resources } : { resource: s.resource });
const record = (c: ScopeCopy, cursor: string, rows: Map<string, Row>): ScopeRecord => ({
  digest: c.digest,
  resource: c.resource,
  ...(c.resources ? { resources: c.resources } : {}),
  ...(c.conditions ? { conditions: c.conditions } : {}),
  cursor,
  rows: Object.fromEntries(rows),
});

/** A synced scope: its rows and state as a subscribe/getSnapshot pair. */
export class Scope {
  private listeners = new Set<(s: ScopeSnapshot) => void>();
  private snap: ScopeSnapshot = { rows: [], byKey: new Map(), state: "loading" };
  /** @internal */ copy: ScopeCopy | null = null;
  /** @internal */ sub = ""; // the current subscription id
  /** @internal */ stopped = false; // refused for good (forbidden, unknown_resource ...)
  /** @internal */ resetNext = false;
  /** @internal */ ready: Promise<void>;
  /** @internal */ pollTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private client: Client,
    readonly resource: string,
    readonly conditions: Conditions | undefined,
    condJSON: string,
    /** A scope of several resources: all of them, sorted. */
    readonly resources?: string[],
  ) {
    this.ready = client._open(this, condJSON);
  }
  /** The rows of one of the scope's resources (a scope of several). */
  rowsOf(resource: string): Row[] {
    return [...(this.copy?.view ?? new Map<string, Row>())].filter(([k]) => !this.resources || k.startsWith(resource + "\u0000")).map(([, r]) => r);
  }
  /** Calls fn with the snapshot now and after every change; returns the unsubscribe function. Works as a React useSyncExternalStore subscribe, and as a Svelte store. */
  subscribe = (fn: (s: ScopeSnapshot) => void): (() => void) => {
    this.listeners.add(fn);
    fn(this.snap);
    return () => this.listeners.delete(fn);
  };
  /** The current snapshot: the same object until the rows or state change. */
  getSnapshot = (): ScopeSnapshot => this.snap;
  /** @internal */ _set(state?: ScopeState, error?: { code: string; message: string }) {
    const view = this.copy?.view ?? new Map<string, Row>();
    const st = state ?? this.snap.state;
    const err = st === "error" ? (error ?? this.snap.error) : undefined;
    if (view === this.snap.byKey && st === this.snap.state && err === this.snap.error) return;
    this.snap = { rows: [...view.values()], byKey: view, state: st, ...(err ? { error: err } : {}) };
    for (const fn of [...this.listeners]) fn(this.snap);
  }
  /** Stops syncing the scope in this client (its stored copy stays). */
  close() {
    this.client._drop(this);
  }
}

/** A status store: subscribe/getSnapshot like a Scope. */
class StatusStore {
  private listeners = new Set<(s: Status) => void>();
  snap: Status = { state: "connecting", pending: 0, transport: "ws" };
  subscribe = (fn: (s: Status) => void): (() => void) => {
    this.listeners.add(fn);
    fn(this.snap);
    return () => this.listeners.delete(fn);
  };
  getSnapshot = (): Status => this.snap;
  set(s: Partial<Status>) {
    const n = { ...this.snap, ...s };
    if (n.state !== "error") delete n.code, delete n.message;
    if ((Object.keys(n) as (keyof Status)[]).every((k) => n[k] === this.snap[k]) && Object.keys(n).length === Object.keys(this.snap).length) return;
    this.snap = n;
    for (const fn of [...this.listeners]) fn(n);
  }
}

/** Creates a client; it connects at once and reconnects until close(). */
export function createClient(opts: Options = {}): Client {
  return new Client(opts);
}

const RESEND_CODES = ["unavailable", "draining"];
const FATAL_SUB_CODES = ["forbidden", "unknown_resource", "invalid_conditions", "too_many_conditions", "bad_frame"];

export class Client {
  readonly status = new StatusStore();
  private o: Required<Pick<Options, "pollInterval" | "minBackoff" | "maxBackoff" | "transport">> & Options;
  private base: string; // http(s) URL of the prefix
  private storeP: Promise<Store>;
  private store!: Store;
  private replica = new Replica();
  private scopes = new Set<Scope>();
  private handles = new Map<string, Handle>();
  private origin = "";
  private ws: WebSocket | null = null;
  private conn = 0; // connection number, for stale callbacks
  private welcomed = false;
  private attempt = 0;
  private failedOpens = 0;
  private subSeq = 0;
  private seq = 0;
  private chain: Promise<void> = Promise.resolve();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private closed = false;
  private lastToken = "";
  private refusedToken: string | null = null;
  private sent = new Set<string>(); // keys sent on this connection
  private bc: BroadcastChannel | null = null;
  private started: Promise<void>;
  private forgotten = new Set<string>(); // keys this tab settled or saw rejected: never taken from the store again

  constructor(opts: Options) {
    this.o = { pollInterval: 2000, minBackoff: 100, maxBackoff: 30000, transport: "auto", ...opts };
    const loc = (globalThis as { location?: Location }).location;
    this.base = new URL(opts.url ?? "/tide", loc?.href ?? "http://localhost/").href.replace(/\/$/, "");
    const s = opts.store;
    this.storeP =
      typeof s === "object"
        ? Promise.resolve(s)
        : s === "memory" || typeof indexedDB === "undefined"
          ? Promise.resolve(memoryStore())
          : indexedDBStore(opts.dbName).catch((e) => {
              this.emit({ type: "error", error: e as Error });
              return memoryStore(); // IndexedDB unavailable (private mode ...): memory
            });
    if ((this.o.transport === "auto" && !this.wsCtor()) || this.o.transport === "poll") this.status.set({ transport: "poll" });
    this.started = this.start();
  }

  private wsCtor(): typeof WebSocket | undefined {
    return this.o.WebSocket ?? (globalThis as { WebSocket?: typeof WebSocket }).WebSocket;
  }

  private emit(e: ClientEvent) {
    try {
      this.o.onEvent?.(e);
    } catch {
      /* an app's handler must not break the client */
    }
  }

  private async start() {
    this.store = await this.storeP;
    this.origin = await this.store.meta("origin", () => "web-" + randomHex().slice(0, 16));
    if (typeof BroadcastChannel !== "undefined") {
      this.bc = new BroadcastChannel("tide:" + (this.o.dbName ?? "tide"));
      this.bc.onmessage = (ev: MessageEvent) => {
        const m = typeof ev.data === "string" ? ev.data : "";
        if (m.startsWith("rejected:")) void (this.chain = this.chain.then(() => this.dropRejected(m.slice(9))));
        else void this.loadQueue();
      };
    }
    await this.loadQueue();
    if (this.o.resume !== false) for (const r of (await this.store.listScopes?.()) ?? []) this.scope(r.resources ?? r.resource, r.conditions);
    this.connect();
  }

  /**
   * Takes the shared queue's mutations this tab does not hold yet into its
   * log (at start: its own after a reload, other tabs' queued ones; later:
   * when another tab queues one). Every tab of the origin sends every queued
   * mutation: the server applies each key at most once and answers a repeat
   * with the recorded answer, so no tab owns the queue, none can lose a
   * mutation to another, and a closed tab's mutations are in flight from
   * the others already.
   */
  private async loadQueue() {
    const items = (await this.store.loadQueue()).sort((a, b) => a.seq - b.seq);
    let got = false;
    for (const it of items) {
      if (this.forgotten.has(it.key) || this.replica.log.some((x) => x.key === it.key)) continue;
      this.insert(it);
      this.seq = Math.max(this.seq, it.seq);
      got = true;
    }
    if (got) {
      this.changed(this.replica.refresh());
      this.settle();
      this.flush();
    }
  }

  /** Another tab's send of key was rejected: roll it back here too (it is out of the store). */
  private dropRejected(key: string) {
    this.forgotten.add(key);
    const it = this.replica.reject(key);
    if (!it) return;
    const h = this.handles.get(key);
    this.handles.delete(key);
    h?.result.fail(new RejectError(key, "rejected", "rejected in another tab"));
    h?.settled.ok();
    this.changed(this.replica.refresh());
    this.pending();
  }

  private insert(it: LogItem) {
    const log = this.replica.log;
    if (it.acked) {
      const i = log.findIndex((x) => !x.acked);
      log.splice(i < 0 ? log.length : i, 0, it);
    } else log.push(it);
    this.handles.set(it.key, { result: deferred(), settled: deferred() });
    this.pending();
  }

  /**
   * Starts syncing a scope (the same scope twice returns the same Scope):
   * one resource, or several sharing the conditions' columns under one
   * cursor, whose transactions arrive whole. The scope is followed until
   * forget: a client started again on the same store resumes it.
   */
  scope(resource: string | string[], conditions?: Conditions): Scope {
    const names = [...new Set(typeof resource === "string" ? [resource] : resource)].sort();
    if (!names.length) throw new Error("tide: a scope needs a resource");
    const key = names.join("\u0000") + "\u0000" + canonicalConditions(conditions);
    for (const s of this.scopes) if ((s.resources ?? [s.resource]).join("\u0000") + "\u0000" + canonicalConditions(s.conditions) === key) return s;
    const s = new Scope(this, names[0]!, conditions, canonicalConditions(conditions), names.length > 1 ? names : undefined);
    this.scopes.add(s);
    return s;
  }

  /** The scopes this client follows, those resumed from the store included. */
  async followed(): Promise<Scope[]> {
    await this.started.catch(() => {});
    return [...this.scopes];
  }

  /** Stops following s for good: it is closed and its stored copy deleted. */
  async forget(s: Scope) {
    s.close();
    await s.ready;
    if (s.copy) await this.store.deleteScope?.(s.copy.digest);
  }

  /** @internal */
  async _open(s: Scope, condJSON: string) {
    await this.started.catch(() => {});
    const digest = await digestOf(s.resources ?? [s.resource], condJSON);
    const rec = await this.store.loadScope(digest);
    if (!this.scopes.has(s)) return;
    const base = new Map(Object.entries(rec?.rows ?? {}));
    const copy: ScopeCopy = { digest, resource: s.resource, resources: s.resources, conditions: s.conditions, base, cursor: rec?.cursor ?? "", view: base };
    s.copy = copy;
    this.replica.scopes.set(digest, copy);
    copy.view = this.replica.computeView(copy);
    s._set(rec ? "cached" : "loading");
    this.subscribeScope(s);
  }

  /** @internal */
  _drop(s: Scope) {
    this.scopes.delete(s);
    if (s.copy) this.replica.scopes.delete(s.copy.digest);
    if (s.sub && this.ws && this.welcomed) this.send({ type: "unsubscribe", id: s.sub });
    s.sub = "";
    clearTimeout(s.pollTimer);
  }

  /** Pending (unsettled) mutations. */
  get pendingKeys(): string[] {
    return this.replica.log.map((it) => it.key);
  }

  private pending() {
    this.status.set({ pending: this.replica.log.length });
  }

  /**
   * mutate asks the server to run the resource's mutator name with args.
   * local, if given, changes the local copy at once (optimistically); the
   * mutation is queued (persisted) and sent, and resent with its key until
   * answered.
   */
  mutate(resource: string, name: string, args: unknown = {}, mo: MutateOptions = {}): Mutation {
    const key = mo.key ?? randomHex();
    if (!key || key.length > 128) throw new Error("tide: an idempotency key is 1-128 bytes");
    if (this.replica.log.some((x) => x.key === key)) throw new Error(`tide: mutation ${key} is already pending`);
    const tp = mo.traceparent;
    if (tp !== undefined && (tp.length > 128 || /[\x00-\x1f\x7f]/.test(tp))) throw new Error("tide: a traceparent is at most 128 bytes without control characters");
    const ops: Op[] = [];
    if (mo.local) {
      const r = this.replica;
      const tx: LocalTx = {
        get: (res, k) => {
          const op = lastOp(ops, res, k);
          const row = op !== undefined ? op : r.lookup(res, k);
          return row && (JSON.parse(JSON.stringify(row)) as Row);
        },
        upsert: (res, k, row) => {
          if (!isObj(row)) throw new Error("tide: a row is an object");
          ops.push({ resource: res, key: k, row: JSON.parse(JSON.stringify(row)) as Row });
        },
        delete: (res, k) => void ops.push({ resource: res, key: k, row: null }),
      };
      mo.local(tx);
    }
    this.seq = Math.max(this.seq + 1, Date.now() * 1000);
    const strategy = mo.strategy ?? "server-wins";
    const it: LogItem = { key, seq: this.seq, resource, name, args, at: Date.now(), strategy: strategyName(strategy), ops, acked: false, cursor: "", run: strategy };
    if (tp) it.traceparent = tp;
    this.insert(it);
    this.changed(this.replica.refresh([resource, ...ops.map((o) => o.resource)]));
    const h = this.handles.get(key)!;
    const queued = this.started.then(() => this.store.putMutation(it));
    queued.then(() => (this.bc?.postMessage("queue"), this.flush()), (e) => this.emit({ type: "error", error: e as Error }));
    return { key, queued, result: h.result.p, settled: h.settled.p };
  }

  /** Reconnects at once: after an error state (new credentials), or to skip a backoff wait. */
  reconnect() {
    if (this.closed) return;
    clearTimeout(this.timer);
    this.status.set({ state: "connecting" });
    const ws = this.ws;
    this.ws = null;
    this.conn++;
    ws?.close(1000);
    this.attempt = 0;
    this.refusedToken = null;
    void this.started.then(() => this.connect());
  }

  /** Ends the connection and every timer; stored data stays. */
  close() {
    this.closed = true;
    clearTimeout(this.timer);
    for (const s of this.scopes) clearTimeout(s.pollTimer);
    this.bc?.close();
    const ws = this.ws;
    this.ws = null;
    this.conn++;
    ws?.close(1000);
  }

  private changed(scs: ScopeCopy[]) {
    for (const s of this.scopes) if (s.copy && scs.includes(s.copy)) s._set();
  }

  private updateStatus() {
    if (this.status.snap.state === "error") return;
    const connected = this.status.snap.transport === "poll" ? this.failedOpens === 0 : this.welcomed;
    if (!connected) return;
    const live = [...this.scopes].every((s) => s.stopped || s.getSnapshot().state === "live");
    this.status.set({ state: live ? "live" : "catching-up" });
  }

  // ---- the WebSocket session ----

  private connect() {
    if (this.closed) return;
    if (this.status.snap.transport === "poll") return this.pollAll();
    const Ctor = this.wsCtor()!;
    const conn = ++this.conn;
    this.welcomed = false;
    this.sent.clear();
    for (const s of this.scopes) s.sub = "";
    if (this.status.snap.state !== "offline") this.status.set({ state: "connecting" });
    let ws: WebSocket;
    let opened = false;
    try {
      ws = new Ctor(this.base.replace(/^http/, "ws") + "/ws");
    } catch (e) {
      this.emit({ type: "error", error: e as Error });
      return this.retry(false);
    }
    this.ws = ws;
    ws.onopen = async () => {
      if (conn !== this.conn) return;
      opened = true;
      this.failedOpens = 0;
      try {
        const hello: { [k: string]: unknown } = { type: "hello", origin: this.origin };
        if (this.o.build) hello.build = this.o.build;
        if (this.o.token) hello.token = this.lastToken = await this.o.token();
        if (conn === this.conn) this.send(hello);
      } catch (e) {
        this.emit({ type: "error", error: e as Error }); // the token provider failed: retried with backoff
        if (conn === this.conn) ws.close(4999);
      }
    };
    ws.onmessage = (ev: MessageEvent) => {
      if (conn !== this.conn) return;
      this.receive(typeof ev.data === "string" ? ev.data : "");
    };
    ws.onclose = (ev: CloseEvent) => {
      if (conn !== this.conn) return;
      this.ws = null;
      const wasWelcomed = this.welcomed;
      this.welcomed = false;
      for (const s of this.scopes) s.sub = "";
      this.emit({ type: "close", code: ev.code, reason: ev.reason });
      if (!opened && ++this.failedOpens >= 3 && this.o.transport === "auto") {
        // WebSockets look blocked: fall back to polling if it answers.
        return void this.probePoll().then((ok) => (ok ? (this.status.set({ transport: "poll" }), this.connect()) : this.retry(false)));
      }
      switch (ev.code) {
        case 4000:
          return this.fail("unsupported_version", "the server does not speak this client's protocol version: update the client");
        case 1008:
          if (!this.o.token || !wasWelcomed || this.refusedToken === this.lastToken) {
            return this.fail(this.lastCode || "unauthenticated", "refused by policy (close 1008); not retrying with the same credentials");
          }
          this.refusedToken = this.lastToken;
          return this.retry(false);
        case 4002:
          this.attempt = 0;
          return this.retry(true);
      }
      this.retry(false);
    };
  }

  private lastCode = "";

  private fail(code: string, message: string) {
    this.status.set({ state: "error", code, message });
    this.emit({ type: "error", error: new Error(`tide: ${code}: ${message}`) });
  }

  private retry(atOnce: boolean) {
    if (this.closed) return;
    this.status.set({ state: "offline" });
    const cap = atOnce ? 250 : Math.min(this.o.maxBackoff, this.o.minBackoff * 2 ** this.attempt++);
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.connect(), Math.random() * cap);
  }

  private send(f: { [k: string]: unknown }) {
    const frame = { v: 1, ...f };
    this.emit({ type: "frame-out", frame });
    try {
      this.ws?.send(JSON.stringify(frame));
    } catch (e) {
      this.emit({ type: "error", error: e as Error });
    }
  }

  /** @internal Feeds one server text frame to the client (the socket's onmessage). Never throws. */
  receive(text: string) {
    let f: ServerFrame;
    try {
      f = decodeServerFrame(text);
    } catch (e) {
      this.emit({ type: "error", error: e as Error });
      this.ws?.close(4998, "bad frame"); // loud: drop the connection, resume from stored cursors
      return;
    }
    this.emit({ type: "frame-in", frame: f });
    const conn = this.conn;
    this.chain = this.chain
      .then(() => (conn === this.conn ? this.handle(f) : undefined))
      .catch((e) => {
        this.emit({ type: "error", error: e as Error });
        if (conn === this.conn) this.ws?.close(4998, "apply failed");
      });
  }

  private async handle(f: ServerFrame) {
    if (topicFrame(this, f)) return; // app channels: the section at the end of this file
    switch (f.type) {
      case "welcome":
        this.welcomed = true;
        rejoinTopics(this);
        this.attempt = 0;
        this.refusedToken = null;
        this.status.set({ state: "catching-up" });
        for (const s of this.scopes) if (s.copy) this.subscribeScope(s);
        this.flush();
        return this.updateStatus();
      case "update-available":
        this.status.set({ updateAvailable: f.build });
        return this.emit({ type: "update-available", build: f.build });
      case "refresh-token":
        if (this.o.token) {
          const conn = this.conn;
          void Promise.resolve(this.o.token()).then(
            (t) => {
              if (conn !== this.conn || t === this.lastToken) return;
              this.lastToken = t;
              this.send({ type: "refresh", token: t });
            },
            (e) => this.emit({ type: "error", error: e as Error }),
          );
        }
        return;
      case "ack":
        return this.onAck(f);
      case "reject":
        return this.onReject(f);
      case "error":
        return this.onError(f);
    }
    const s = [...this.scopes].find((x) => x.sub !== "" && x.sub === f.id);
    if (!s) return; // a stale subscription
    await this.applyFrame(s, f);
  }

  private async applyFrame(s: Scope, f: ServerFrame) {
    const c = s.copy!;
    if (f.type === "reset") {
      c.cursor = "";
      s.resetNext = true;
      await this.store.saveScope(record(c, "", new Map()), true);
      c.base = new Map();
      this.changed(this.replica.refresh(c.resources ?? [c.resource]));
      return;
    }
    if (f.type === "caught-up") {
      if (newer(f.cursor, c.cursor)) await this.saveBase(s, c.base, f.cursor, false);
      s._set("live");
      this.settle();
      return this.updateStatus();
    }
    if (f.type !== "changes") return;
    const reset = s.resetNext;
    if (!reset && !newer(f.cursor, c.cursor)) return; // a duplicate or older delivery
    for (const e of f.entries)
      if (c.resources ? !c.resources.includes(e.resource ?? "") : e.resource && e.resource !== c.resource)
        throw new ProtocolError(`changes of subscription ${f.id ?? ""} carry resource ${JSON.stringify(e.resource)}, not ${c.resources ?? c.resource}`);
    const next = applyBase(c.base, reset, f.entries, c);
    await this.saveBase(s, next, f.cursor, reset);
    s.resetNext = false;
    if (s.getSnapshot().state !== "live") s._set("catching-up");
    this.settle();
  }

  private async saveBase(s: Scope, next: Map<string, Row>, cursor: string, reset: boolean) {
    const c = s.copy!;
    const sub = s.sub;
    await this.store.saveScope(record(c, cursor, next), reset);
    if (sub !== s.sub && this.status.snap.transport === "ws") return; // the subscription ended meanwhile: not installed
    c.base = next;
    c.cursor = cursor;
    c.refused = false;
    this.changed(this.replica.refresh(c.resources ?? [c.resource]));
  }

  private settle() {
    const done = this.replica.settle();
    for (const it of done) {
      this.forgotten.add(it.key);
      void this.store.deleteMutation(it.key);
      const h = this.handles.get(it.key);
      this.handles.delete(it.key);
      h?.settled.ok();
    }
    if (done.length) {
      this.changed(this.replica.refresh());
      this.pending();
    }
  }

  private subscribeScope(s: Scope) {
    if (!s.copy || s.stopped) return;
    if (this.status.snap.transport === "poll") return this.pollScope(s);
    if (!this.welcomed || !this.ws) return;
    s.sub = String(++this.subSeq);
    // A scope of several resources names them in resources only, so a server without them refuses it.
    const f: { [k: string]: unknown } = { type: "subscribe", id: s.sub, ...names(s) };
    if (s.conditions && Object.keys(s.conditions).length) f.conditions = s.conditions;
    if (s.copy.cursor) f.cursor = s.copy.cursor;
    else s.resetNext = true; // without a cursor the copy starts empty
    if (s.getSnapshot().state !== "cached") s._set("catching-up");
    this.send(f);
  }

  private frameOf(it: LogItem) {
    return { type: "mutate", key: it.key, seq: it.seq, resource: it.resource, name: it.name, args: it.args ?? {}, at: it.at, ...(it.traceparent ? { traceparent: it.traceparent } : {}) };
  }

  /** Sends the unanswered mutations in seq order (after the subscriptions). */
  private flush() {
    if (this.status.snap.transport === "poll") return void this.postAll();
    if (!this.welcomed || !this.ws) return;
    for (const it of [...this.replica.log].sort((a, b) => a.seq - b.seq)) {
      if (it.acked || this.sent.has(it.key)) continue;
      this.sent.add(it.key);
      this.send(this.frameOf(it));
    }
  }

  private async onAck(f: { key: string; cursor: string; entries: Entry[]; replayed?: boolean }) {
    const { item, conflicts } = this.replica.ack(f.key, f.cursor, f.entries);
    if (!item) return;
    if (!this.forgotten.has(item.key)) await this.store.putMutation(item);
    const h = this.handles.get(f.key) ?? { result: deferred<Result>(), settled: deferred<void>() };
    this.handles.set(f.key, h);
    for (const c of conflicts) this.emit({ type: "conflict", error: c });
    if (conflicts.length) h.result.fail(conflicts[0]);
    else h.result.ok({ key: f.key, cursor: f.cursor, entries: f.entries, replayed: !!f.replayed });
    this.changed(this.replica.refresh());
    this.pending();
    this.settle();
  }

  private async onReject(f: { key: string; code: string; message: string }) {
    if (RESEND_CODES.includes(f.code)) {
      // Resent later with the same key.
      this.sent.delete(f.key);
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.flush(), 1000 + Math.random() * 1000);
      return;
    }
    const it = this.replica.reject(f.key);
    if (!it) return;
    this.forgotten.add(f.key);
    await this.store.deleteMutation(f.key);
    this.bc?.postMessage("rejected:" + f.key);
    const h = this.handles.get(f.key);
    this.handles.delete(f.key);
    h?.result.fail(new RejectError(f.key, f.code, f.message));
    h?.settled.ok();
    this.changed(this.replica.refresh());
    this.pending();
  }

  private onError(f: { id?: string; code: string; message: string }) {
    const err = new Error(`tide: ${f.code}: ${f.message}`);
    this.emit({ type: "error", error: err });
    if (!f.id) {
      this.lastCode = f.code;
      return; // a connection error; a close follows if it is fatal
    }
    const s = [...this.scopes].find((x) => x.sub !== "" && x.sub === f.id);
    if (!s) return;
    s.sub = "";
    if (f.code === "invalid_cursor") {
      s.copy!.cursor = "";
      return this.subscribeScope(s);
    }
    if (f.code === "unauthenticated" && this.o.token) return void this.ws?.close(4997, "fresh credentials");
    if (FATAL_SUB_CODES.includes(f.code)) {
      s.stopped = true;
      s._set("error", { code: f.code, message: f.message });
      if (s.copy) {
        s.copy.refused = true; // it brings nothing until allowed again
        this.settle();
      }
      return this.updateStatus();
    }
    // Transient (internal, unavailable, too_many_subscriptions ...): try again later.
    s._set("error", { code: f.code, message: f.message });
    setTimeout(() => this.subscribeScope(s), Math.random() * Math.min(this.o.maxBackoff, this.o.minBackoff * 2 ** 5));
  }

  // ---- polling over HTTP ----

  private async post(path: string, body: unknown, headers: { [k: string]: string } = {}): Promise<{ status: number; frame: ServerFrame }> {
    const f = this.o.fetch ?? fetch;
    const res = await f(this.base + path, { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json", ...headers }, body: JSON.stringify(body) });
    return { status: res.status, frame: decodeServerFrame(await res.text()) };
  }

  private async probePoll(): Promise<boolean> {
    try {
      const { status } = await this.post("/changes", { v: 1 });
      return status !== 404 && status < 500;
    } catch {
      return false;
    }
  }

  private pollAll() {
    this.failedOpens = 0;
    for (const s of this.scopes) this.pollScope(s);
    void this.postAll();
  }

  private pollScope(s: Scope) {
    if (!s.copy || s.stopped || this.closed) return;
    clearTimeout(s.pollTimer);
    const run = () => {
      const body: { [k: string]: unknown } = { v: 1, ...names(s), cursor: s.copy!.cursor };
      if (s.conditions) body.conditions = s.conditions;
      if (!s.copy!.cursor) s.resetNext = true;
      this.post("/changes", body).then(
        ({ status, frame }) => {
          this.chain = this.chain.then(async () => {
            if (frame.type === "error") {
              if (FATAL_SUB_CODES.includes(frame.code) || status === 403 || status === 404) {
                s.stopped = true;
                s._set("error", { code: frame.code, message: frame.message });
                return this.updateStatus();
              }
              throw new Error(`tide: ${frame.code}: ${frame.message}`);
            }
            this.status.set({ state: this.status.snap.state === "error" ? "error" : "catching-up" });
            this.attempt = 0;
            await this.applyFrame(s, frame);
            const more = frame.type === "reset" || (frame.type === "changes" && frame.more);
            if (!more) {
              s._set("live");
              this.settle();
              this.updateStatus();
            }
            if (!this.closed && this.scopes.has(s)) s.pollTimer = setTimeout(run, more ? 0 : this.o.pollInterval);
          });
          return this.chain;
        },
        (e) => {
          throw e;
        },
      ).catch((e) => {
        this.emit({ type: "error", error: e as Error });
        this.status.set({ state: "offline" });
        const cap = Math.min(this.o.maxBackoff, this.o.minBackoff * 2 ** this.attempt++);
        if (!this.closed) s.pollTimer = setTimeout(run, Math.random() * cap);
      });
    };
    run();
  }

  private posting = false;
  private async postAll() {
    if (this.posting || this.closed) return;
    this.posting = true;
    try {
      for (const it of [...this.replica.log].sort((a, b) => a.seq - b.seq)) {
        if (it.acked) continue;
        const { frame } = await this.post("/mutate", this.frameOf(it), { "Tide-Origin": this.origin });
        await (this.chain = this.chain.then(() => (frame.type === "ack" || frame.type === "reject" ? this.handle(frame) : undefined)));
      }
    } catch (e) {
      this.emit({ type: "error", error: e as Error });
      clearTimeout(this.timer);
      this.timer = setTimeout(() => void this.postAll(), this.o.pollInterval);
    } finally {
      this.posting = false;
    }
  }
}

// ---- app channels: topics and presence ----
//
// A topic is an app channel the server declared (docs/channels.md):
// ephemeral messages, and optionally who is subscribed (presence). Topics
// are joined on every connection until left; messages sent while offline
// are not delivered later.

/** One subscriber of a presence topic: a connection of a principal. */
export interface Member {
  id: string;
  principal: string;
  state?: unknown;
}

/** A topic's state for a UI: its presence list and the last refusal. */
export interface TopicSnapshot {
  members: Member[];
  error?: { code: string; message: string };
}

/** A decoded channel frame (id is never set: frames name their topic). */
export type TopicFrame = { id?: undefined; topic: string } & (
  | { type: "topic-subscribed"; presence?: boolean }
  | { type: "message"; data: unknown; from?: string }
  | { type: "presence"; members: Member[] }
  | { type: "presence-diff"; joins: Member[]; leaves: Member[] }
);

const topicFrameTypes = ["topic-subscribed", "message", "presence", "presence-diff"];

function decodeMembers(f: { [k: string]: unknown }, k: string): Member[] {
  const list = f[k] ?? [];
  if (!Array.isArray(list)) throw new ProtocolError(`${String(f.type)}: "${k}" is not an array`);
  return list.map((m): Member => {
    if (!isObj(m)) throw new ProtocolError("a member is not an object");
    return { id: str(m, "id"), principal: str(m, "principal", true), state: m.state };
  });
}

function decodeTopicFrame(f: { [k: string]: unknown }): TopicFrame {
  const topic = str(f, "topic");
  switch (f.type) {
    case "message":
      if (f.data === undefined) throw new ProtocolError(`message: no "data"`);
      return { type: "message", topic, data: f.data, from: str(f, "from", true) };
    case "presence":
      return { type: "presence", topic, members: decodeMembers(f, "members") };
    case "presence-diff":
      return { type: "presence-diff", topic, joins: decodeMembers(f, "joins"), leaves: decodeMembers(f, "leaves") };
  }
  return { type: "topic-subscribed", topic, presence: f.presence === true };
}

type Wire = { send(f: { [k: string]: unknown }): void; welcomed: boolean };
const topicsOf = new WeakMap<Client, Map<string, Topic>>();

/** A joined topic. Bind a UI with subscribe/getSnapshot, like Scope. */
export class Topic {
  private members = new Map<string, Member>();
  private snap: TopicSnapshot = { members: [] };
  private listeners = new Set<(s: TopicSnapshot) => void>();
  private handlers = new Set<(data: unknown, from: string) => void>();
  private left = false;

  constructor(
    private client: Client,
    readonly name: string,
    private state: unknown,
  ) {}

  /** Calls fn with every message of the topic; returns its remover. */
  onMessage(fn: (data: unknown, from: string) => void): () => void {
    this.handlers.add(fn);
    return () => this.handlers.delete(fn);
  }

  subscribe(fn: (s: TopicSnapshot) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  getSnapshot(): TopicSnapshot {
    return this.snap;
  }

  /** Sends data to every subscriber; false when offline (nothing is queued). */
  publish(data: unknown): boolean {
    return this.wire({ type: "publish", topic: this.name, data });
  }

  /** Replaces this client's presence state: sent now, and on every rejoin. */
  setState(state: unknown) {
    this.state = state;
    this.wire({ type: "presence-update", topic: this.name, state });
  }

  leave() {
    if (this.left) return;
    this.left = true;
    topicsOf.get(this.client)?.delete(this.name);
    this.wire({ type: "topic-unsubscribe", topic: this.name });
  }

  /** @internal */
  join() {
    this.wire({ type: "topic-subscribe", topic: this.name, state: this.state });
  }

  private wire(f: { [k: string]: unknown }): boolean {
    const w = this.client as unknown as Wire;
    if (this.left && f.type !== "topic-unsubscribe") return false;
    if (w.welcomed) w.send(f);
    return w.welcomed;
  }

  /** @internal */
  apply(f: ServerFrame) {
    if (f.type === "message") {
      for (const h of this.handlers) h(f.data, f.from ?? "");
      return;
    }
    if (f.type === "presence") this.members = new Map(f.members.map((m) => [m.id, m]));
    else if (f.type === "presence-diff") {
      for (const m of f.leaves) this.members.delete(m.id);
      for (const m of f.joins) this.members.set(m.id, m);
    } else if (f.type === "error") {
      if (f.code === "duplicate_subscription") return;
      this.snap = { ...this.snap, error: { code: f.code, message: f.message } };
    } else return;
    if (f.type !== "error") this.snap = { members: [...this.members.values()] };
    for (const l of this.listeners) l(this.snap);
  }
}

declare module "./tide" {
  interface Client {
    /** Joins a topic (or returns the one joined), with a presence state. */
    topic(name: string, opts?: { state?: unknown }): Topic;
  }
}

Client.prototype.topic = function (this: Client, name: string, opts: { state?: unknown } = {}): Topic {
  let m = topicsOf.get(this);
  if (!m) topicsOf.set(this, (m = new Map()));
  let t = m.get(name);
  if (!t) {
    m.set(name, (t = new Topic(this, name, opts.state)));
    t.join();
  }
  return t;
};

function rejoinTopics(c: Client) {
  queueMicrotask(() => {
    for (const t of topicsOf.get(c)?.values() ?? []) t.join();
  });
}

function topicFrame(c: Client, f: ServerFrame): boolean {
  const name = "topic" in f ? f.topic : undefined;
  if (name === undefined || (f.type === "error" && !name)) return false;
  topicsOf.get(c)?.get(name)?.apply(f);
  return true;
}
