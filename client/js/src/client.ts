// The client: its scopes, the mutation log and offline queue, the store
// and whose data it holds, and the session over a WebSocket (or HTTP
// polling, see poll.ts).
import { canonicalConditions } from "./conditions.js";
import { newer } from "./cursor.js";
import { ConflictError, RejectError, TideError, type Problem } from "./errors.js";
import { decodeServerFrame, isObj, ProtocolError, problemOf, type Conditions, type Entry, type Row, type ServerFrame } from "./protocol.js";
import { applyBase, Replica, strategyName, type LogItem, type ScopeCopy } from "./replica.js";
import { indexedDBStore, memoryStore, type Store } from "./storage.js";
import { digestOf, FATAL_SUB_CODES, names, randomHex, record, Scope } from "./scope.js";
import { frameOf, handle, localOps, type Handle, type MutateOptions, type Mutation, type Result } from "./queue.js";
import { Topic } from "./channels.js";
import { Subscribable } from "./subscribable.js";
import type { ArgsOf, ConditionsOf, MessageOf, MutateRest, MutatorName, PresenceOf, ResourceName, RowOf, TideSchema, TopicName } from "./schema.js";
import { pollAll, pollScope, postAll } from "./poll.js";

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
  | { type: "close"; code: number; reason: string }
  /** The store held another principal's data: it was discarded (its queued mutations rejected with code principal_changed). */
  | { type: "principal-changed"; from: string; to: string }
  /** A queued mutation the server closed 5 connections on without answering was settled as rejected (code undeliverable). */
  | { type: "undeliverable"; error: RejectError };

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

type Frame = { [k: string]: unknown };

/**
 * Creates a client; it connects at once and reconnects until close(). With
 * the app's generated schema, createClient<Schema>(), scope, mutate and
 * topic check resource, column, mutator and topic names and types at
 * compile time (docs/types.md).
 */
export function createClient<S extends TideSchema = TideSchema>(opts: Options = {}): Client<S> {
  return new Client<S>(opts);
}

/** Rejects that ask for the mutation to be sent again later, with the same key (rate_limited: too many of this user's mutations wait on the server). */
const RESEND_CODES = ["unavailable", "draining", "rate_limited"];
/** Closes that are the server's lifecycle (going away, restart, backpressure, drain), not a verdict on what was sent. */
const LIFECYCLE_CLOSES = [1001, 1012, 1013, 4002];
/** How long a socket may take to open and be welcomed. */
const CONNECT_TIMEOUT = 10000;
const DEFAULT_MAX_FRAME = 65536;

/** A tide client: scopes, mutations and topics over one connection; S is the app's schema (TideSchema: any). */
export class Client<S extends TideSchema = TideSchema> {
  /** The connection's status as a subscribe/getSnapshot pair. */
  readonly status = new Subscribable<Status>({ state: "connecting", pending: 0, transport: "ws" });
  /** @internal */ o_: Required<Pick<Options, "pollInterval" | "minBackoff" | "maxBackoff" | "transport">> & Options;
  /** @internal The http(s) URL of the prefix. */ base_: string;
  /** @internal */ store_!: Store;
  /** @internal */ replica_ = new Replica();
  /** @internal */ scopes_ = new Set<Scope>();
  /** @internal */ topics_ = new Map<string, Topic>();
  /** @internal */ handles_ = new Map<string, Handle>();
  /** @internal */ origin_ = "";
  /** @internal */ ws_?: WebSocket | undefined;
  /** @internal The connection number, for stale callbacks. */ conn_ = 0;
  /** @internal The welcome was handled: the session is open. */ welcomed_?: boolean;
  /** @internal The welcome arrived (it may still be in the chain). */ hi_?: boolean;
  /** @internal */ attempt_ = 0;
  /** @internal */ failedOpens_ = 0;
  /** @internal */ subSeq_ = 0;
  /** @internal */ seq_ = 0;
  /** @internal Frames are applied one at a time, in order. */ chain_: Promise<void> = Promise.resolve();
  /** @internal */ timer_: ReturnType<typeof setTimeout> | undefined;
  /** @internal The connect timeout, then the heartbeat deadline. */ hb_: ReturnType<typeof setTimeout> | undefined;
  /** @internal The welcome's heartbeat interval (0: none). */ hbMs_ = 0;
  /** @internal */ closed_?: boolean;
  /** @internal */ lastToken_?: string;
  /** @internal */ refusedToken_?: string | undefined;
  /** @internal The last connection-level error frame. */ lastErr_: Problem | undefined;
  /** @internal Keys sent on this connection. */ sent_ = new Set<string>();
  /** @internal The other tabs on the store: ["queue"], ["clear", code] or ["reject", key, code, message, detail]. */ bc_: BroadcastChannel | undefined;
  /** @internal */ started_: Promise<void>;
  /** @internal Resolves once the stored data may be shown (see bind_). */ trusted_: Promise<void>;
  /** @internal */ trust_!: () => void;
  /** @internal */ isTrusted_?: boolean;
  /** @internal The principal this page's data belongs to, once a server said (undefined before). */ me_: string | undefined;
  /** @internal The last welcome's max_frame_bytes, kept in the store. */ maxFrame_ = DEFAULT_MAX_FRAME;
  /** @internal Keys this tab settled or saw rejected: never taken from the store again. */ forgotten_ = new Set<string>();
  /** @internal */ posting_?: boolean;
  /** @internal The window's online/offline listener. */ net_: (ev: Event) => void;

  /** @internal */
  constructor(opts: Options) {
    const o = (this.o_ = { pollInterval: 2000, minBackoff: 100, maxBackoff: 30000, transport: "auto", ...opts });
    this.base_ = new URL(opts.url ?? "/tide", globalThis.location?.href ?? "http://localhost/").href.replace(/\/$/, "");
    this.trusted_ = new Promise((ok) => (this.trust_ = ok));
    const s = opts.store;
    const storeP =
      typeof s === "object"
        ? Promise.resolve(s)
        : s === "memory" || typeof indexedDB === "undefined"
          ? Promise.resolve(memoryStore())
          : indexedDBStore(this.dbName_()).catch((e: Error) => {
              this.error_(e);
              return memoryStore(); // IndexedDB unavailable (private mode ...): memory
            });
    if ((o.transport === "auto" && !this.wsCtor_()) || o.transport === "poll") this.setStatus_({ transport: "poll" });
    // The browser knows when the network goes: no need to wait for a heartbeat then; and back at once when it returns.
    this.net_ = (ev) => (ev.type === "online" ? !this.welcomed_ && this.reconnect() : this.ws_ ? this.lost_(4996, "offline") : this.offline_());
    globalThis.addEventListener?.("online", this.net_);
    globalThis.addEventListener?.("offline", this.net_);
    this.started_ = this.start_(storeP);
  }

  /** @internal The IndexedDB database (and BroadcastChannel) name: one per user when the app names its user. */
  dbName_() {
    const o = this.o_;
    return (o.dbName ?? "tide") + (o.user !== undefined ? ":" + o.user : "");
  }

  /** @internal */ wsCtor_(): typeof WebSocket | undefined {
    return this.o_.WebSocket ?? globalThis.WebSocket;
  }

  /** @internal */ emit_(e: ClientEvent) {
    try {
      this.o_.onEvent?.(e);
    } catch {
      /* an app's handler must not break the client */
    }
  }

  /** @internal Reports an error event. */
  error_(e: unknown) {
    this.emit_({ type: "error", error: e as Error });
  }

  /** @internal */ setStatus_(s: Partial<Status>) {
    const old = this.status.s_;
    const n: { -readonly [K in keyof Status]: Status[K] } = { ...old, ...s };
    if (n.state !== "error") delete n.code, delete n.message;
    if (JSON.stringify(n) !== JSON.stringify(old)) this.status.put_(n);
  }

  /** @internal */ async start_(storeP: Promise<Store>) {
    const store = (this.store_ = await storeP);
    // 128 random bits: the origin scopes the device's idempotency keys (alone, for an anonymous caller) and is never shown to anyone else.
    this.origin_ = this.o_.origin ?? (await store.meta("origin", () => "web-" + randomHex()))!;
    this.maxFrame_ = Number(await store.meta("max_frame_bytes")) || DEFAULT_MAX_FRAME;
    if (typeof BroadcastChannel !== "undefined" && !this.closed_) {
      this.bc_ = new BroadcastChannel("tide:" + this.dbName_());
      this.bc_.onmessage = ({ data: [m, a, b, c, d] }: MessageEvent<string[]>) =>
        (this.chain_ = this.chain_.then(() => (m === "reject" ? this.onReject_(new RejectError(a!, b!, c!, d)) : m === "clear" ? this.cleared_(a!) : this.loadQueue_())));
    }
    if (this.o_.user !== undefined) await this.trustStore_(); // the app says whose data this database holds
    this.connect_();
  }

  /** @internal The store's data may be shown: loads the queue and resumes the followed scopes. */
  async trustStore_() {
    if (this.isTrusted_) return;
    this.isTrusted_ = true;
    await this.loadQueue_();
    if (this.o_.resume !== false) for (const r of (await this.store_.listScopes?.()) ?? []) (this as Client).scope(r.resources ?? r.resource, r.conditions);
    this.trust_();
  }

  /**
   * Binds the store to principal p (the welcome's, or the Tide-Principal
   * header of a poll). A store recorded for p is trusted, an unclaimed one
   * (new, cleared) is claimed; one recorded for another principal is
   * emptied first, so its rows are never shown and its queue — writes this
   * page made before its first welcome included: they are the store's
   * principal's — never sent under p's session.
   * @internal
   */
  async bind_(p: string) {
    if (this.me_ === p) return;
    const store = this.store_;
    const from = await store.meta("principal");
    if (from !== p) {
      if (from !== undefined) {
        await this.discard_("principal_changed", "signed in as another user");
        await store.clear();
        this.bc_?.postMessage(["clear", "principal_changed"]);
        this.emit_({ type: "principal-changed", from, to: p });
      }
      await store.setMeta("principal", p);
    }
    this.me_ = p;
    await this.trustStore_();
  }

  /**
   * Drops this page's copy of the data: every pending mutation is rejected
   * with code, every scope emptied (rows and cursor; the scope objects
   * stay, followed). The store is the caller's business.
   * @internal
   */
  async discard_(code: string, message: string) {
    for (const it of this.replica_.log_) {
      this.forgotten_.add(it.key);
      this.finish_(it.key, new RejectError(it.key, code, message));
    }
    this.replica_.log_ = [];
    for (const s of this.scopes_) {
      const c = s.copy_;
      if (!c) continue;
      c.base_ = new Map();
      c.cursor = "";
      s.set_(s.stopped_ ? undefined : "loading");
    }
    this.refresh_();
    this.pending_();
  }

  /** @internal Another tab discarded the store (a logout, another principal): so does this one, and it asks the server again whose session it is. */
  async cleared_(code: string) {
    await this.discard_(code, "local data cleared");
    this.me_ = undefined;
    this.reconnect();
  }

  /**
   * Wipes the local data of the current store: rows, cursors, queue (each
   * pending mutation is rejected with code "cleared") and meta but the
   * device's origin, here and in the other tabs on the store; every scope is emptied and resubscribed.
   * The logout call: the next session's welcome claims the empty store.
   */
  async clearLocalData(): Promise<void> {
    await this.started_;
    this.detach_()?.close(1000);
    this.welcomed_ = false;
    await (this.chain_ = this.chain_.then(async () => {
      await this.discard_("cleared", "local data cleared");
      await this.store_.clear();
    }));
    this.me_ = undefined;
    this.bc_?.postMessage(["clear", "cleared"]);
    this.reconnect();
  }

  /**
   * Takes the shared queue's mutations this tab does not hold yet into its
   * log (at start: its own after a reload, other tabs' queued ones; later:
   * when another tab queues one). Every tab of the origin sends every queued
   * mutation: the server applies each key at most once and answers a repeat
   * with the recorded answer, so no tab owns the queue, none can lose a
   * mutation to another, and a closed tab's mutations are in flight from
   * the others already.
   * @internal
   */
  async loadQueue_() {
    if (!this.isTrusted_) return;
    const items = (await this.store_.loadQueue()).sort((a, b) => a.seq - b.seq);
    let got = false;
    for (const it of items) {
      if (this.forgotten_.has(it.key) || this.replica_.log_.some((x) => x.key === it.key)) continue;
      this.insert_(it);
      this.seq_ = Math.max(this.seq_, it.seq);
      got = true;
    }
    if (got) {
      this.refresh_();
      this.settle_();
      this.flush_();
    }
  }

  /** @internal Settles key's handle: rejected with err, or settled. */
  finish_(key: string, err?: Error) {
    const h = this.handles_.get(key);
    this.handles_.delete(key);
    if (err) h?.r_.fail(err);
    h?.s_.ok();
  }

  /** @internal */ insert_(it: LogItem, h = handle()) {
    const log = this.replica_.log_;
    if (it.acked) {
      const i = log.findIndex((x) => !x.acked);
      log.splice(i < 0 ? log.length : i, 0, it);
    } else log.push(it);
    this.handles_.set(it.key, h);
    this.pending_();
  }

  /**
   * Starts syncing a scope (the same scope twice returns the same Scope):
   * one resource, or several sharing the conditions' columns under one
   * cursor, whose transactions arrive whole. The scope is followed until
   * forget: a client started again on the same store resumes it.
   */
  scope<R extends ResourceName<S>>(resource: R | R[], conditions?: ConditionsOf<S, R>): Scope<RowOf<S, R>>;
  scope(resource: string | string[], conditions?: object): Scope {
    const list = [...new Set(typeof resource === "string" ? [resource] : resource)].sort();
    if (!list.length) throw new Error("tide: no resource");
    const cj = canonicalConditions(conditions as Conditions | undefined);
    const key = list + "\u0000" + cj;
    for (const s of this.scopes_) if (s.key_ === key) return s;
    const s = new Scope(this, key, list[0]!, conditions as Conditions | undefined, cj, list.length > 1 ? list : undefined);
    this.scopes_.add(s);
    return s;
  }

  /** The scopes this client follows, once the stored ones are resumed (without the user option: once the server confirmed whose store it is). */
  async followed(): Promise<Scope[]> {
    await this.trusted_;
    return [...this.scopes_];
  }

  /** Stops following s for good: it is closed and its stored copy deleted. */
  async forget(s: Scope) {
    s.close();
    await s.ready_;
    if (s.copy_) await this.store_.deleteScope?.(s.copy_.digest);
  }

  /** Joins a topic (or returns the one joined), with a presence state. */
  topic<N extends TopicName<S>>(name: N, opts?: { state?: PresenceOf<S, N> }): Topic<MessageOf<S, N>, PresenceOf<S, N>>;
  topic(name: string, opts: { state?: unknown } = {}): Topic {
    let t = this.topics_.get(name);
    if (!t) {
      this.topics_.set(name, (t = new Topic(this, name, opts.state)));
      t.join_();
    }
    return t;
  }

  /** @internal */
  async open_(s: Scope, condJSON: string) {
    const digest = await digestOf(s.resources ?? [s.resource], condJSON);
    if (!this.scopes_.has(s)) return;
    // At once, the copy holds this page's own pending writes; the stored rows come once the store is trusted.
    const copy: ScopeCopy = (s.copy_ = { digest, resource: s.resource, resources: s.resources, conditions: s.conditions, base_: new Map(), cursor: "", view_: new Map() });
    this.replica_.scopes_.set(digest, copy);
    this.refresh_(s.resources ?? [s.resource]);
    await this.trusted_;
    const rec = await this.store_.loadScope(digest);
    if (!this.scopes_.has(s)) return;
    if (rec && !copy.cursor) {
      copy.base_ = new Map(Object.entries(rec.rows));
      copy.cursor = rec.cursor;
      copy.view_ = this.replica_.computeView_(copy);
      s.set_("cached"); // rows and state in one notification
    }
    s.loaded_ = true;
    this.subscribeScope_(s);
  }

  /** @internal */
  drop_(s: Scope) {
    this.scopes_.delete(s);
    if (s.copy_) this.replica_.scopes_.delete(s.copy_.digest);
    this.unsubscribe_(s);
  }

  /** @internal Ends s's subscription, if any. */
  unsubscribe_(s: Scope) {
    if (s.sub_ && this.welcomed_) this.send_({ type: "unsubscribe", id: s.sub_ });
    s.sub_ = "";
    clearTimeout(s.pollTimer_);
  }

  /** @internal Scope.retry: subscribes s again from no cursor. */
  resubscribe_(s: Scope) {
    const c = s.copy_;
    if (!c || !s.loaded_ || !this.scopes_.has(s)) return; // not opened yet: it subscribes once it is
    this.unsubscribe_(s);
    s.stopped_ = false;
    c.cursor = "";
    s.set_(c.base_.size ? "cached" : "loading");
    this.subscribeScope_(s);
    this.updateStatus_();
  }

  /**
   * @internal The server refused s (its own error, or the connection's
   * credentials): its rows and cursor leave memory and the store at once;
   * the record stays, empty, so the scope is still followed.
   */
  async refuse_(s: Scope, err: Problem, stop: boolean) {
    s.sub_ = "";
    if (stop) s.stopped_ = true;
    const c = s.copy_;
    if (c) {
      c.base_ = new Map();
      c.cursor = "";
      c.refused_ = true; // it brings nothing until allowed again: it holds no mutation back from settling
      this.refresh_(c.resources ?? [c.resource]);
    }
    s.set_("error", err);
    if (c) await this.store_.saveScope(record(c, "", new Map()), true);
    this.settle_();
  }

  /** Pending (unsettled) mutations, oldest first. */
  get pendingKeys(): string[] {
    return this.replica_.log_.map((it) => it.key);
  }

  /** @internal */ pending_() {
    this.setStatus_({ pending: this.replica_.log_.length });
  }

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
  mutate(resource: string, name: string, args: unknown = {}, mo: MutateOptions = {}): Mutation {
    const key = mo.key ?? randomHex();
    if (!key || key.length > 128) throw new Error("tide: bad key");
    if (this.replica_.log_.some((x) => x.key === key)) throw new Error(`tide: ${key} is pending`);
    const tp = mo.traceparent;
    if (tp !== undefined && (tp.length > 128 || /[\x00-\x1f\x7f]/.test(tp))) throw new Error("tide: bad traceparent");
    const strategy = mo.strategy ?? "server-wins";
    const it: LogItem = { key, seq: Math.max(this.seq_ + 1, Date.now() * 1000), resource, name, args, at: Date.now(), strategy: strategyName(strategy), ops: [], acked: false, cursor: "", run_: strategy };
    if (tp) it.traceparent = tp;
    let refused: RejectError | undefined;
    let a: unknown;
    try {
      a = JSON.parse(JSON.stringify(args) ?? "0");
    } catch {
      /* not JSON: refused below */
    }
    if (!isObj((it.args = a))) refused = new RejectError(key, "invalid_args", "the arguments are not a JSON object");
    else {
      const size = new TextEncoder().encode(JSON.stringify({ v: 1, ...frameOf(it) })).length;
      if (size > this.maxFrame_) refused = new RejectError(key, "frame_too_large", `too large to send (${size} bytes; the limit is ${this.maxFrame_})`);
    }
    const h = handle();
    if (refused) {
      h.r_.fail(refused);
      h.s_.ok();
      return { key, queued: h.r_.p as Promise<unknown> as Promise<void>, result: h.r_.p, settled: h.s_.p };
    }
    it.ops = localOps(this.replica_, mo.local);
    this.seq_ = it.seq;
    this.insert_(it, h);
    this.refresh_([resource, ...it.ops.map((o) => o.resource)]);
    const queued = this.started_.then(() => this.store_.putMutation(it));
    queued.then(
      () => (this.bc_?.postMessage(["queue"]), this.flush_()),
      (e: Error) => this.error_(e),
    );
    return { key, queued, result: h.r_.p, settled: h.s_.p };
  }

  /** Reconnects at once: after an error state (new credentials), or to skip a backoff wait. */
  reconnect() {
    if (this.closed_) return;
    clearTimeout(this.timer_);
    this.offline_("connecting");
    this.detach_()?.close(1000);
    this.attempt_ = 0;
    this.refusedToken_ = undefined;
    void this.started_.then(() => this.connect_());
  }

  /** Ends the connection and every timer; stored data stays. */
  close() {
    this.closed_ = true;
    clearTimeout(this.timer_);
    clearTimeout(this.hb_);
    for (const s of this.scopes_) clearTimeout(s.pollTimer_);
    this.bc_?.close();
    globalThis.removeEventListener?.("online", this.net_);
    globalThis.removeEventListener?.("offline", this.net_);
    this.detach_()?.close(1000);
  }

  /** @internal Forgets the current socket (its later events are ignored) and returns it. */
  detach_(): WebSocket | undefined {
    const ws = this.ws_;
    this.ws_ = undefined;
    this.conn_++;
    clearTimeout(this.hb_);
    return ws;
  }

  /** @internal Recomputes the views (of the resources', or all) and notifies the scopes whose view changed. */
  refresh_(resources?: string[]) {
    const scs = this.replica_.refresh_(resources);
    for (const s of this.scopes_) if (s.copy_ && scs.includes(s.copy_)) s.set_();
  }

  /** @internal A random wait in [0, min(maxBackoff, minBackoff·2ⁿ)): full jitter. */
  backoff_(n: number) {
    return Math.random() * Math.min(this.o_.maxBackoff, this.o_.minBackoff * 2 ** n);
  }

  /** @internal */ updateStatus_() {
    const st = this.status.s_;
    if (st.state === "error") return;
    if (!(st.transport === "poll" ? this.failedOpens_ === 0 : this.welcomed_)) return;
    this.setStatus_({ state: [...this.scopes_].every((s) => s.stopped_ || s.s_.state === "live") ? "live" : "catching-up" });
  }

  /**
   * Not connected: no scope says live or catching-up any more, and then
   * the status says so (offline, or connecting: a status listener never
   * sees a scope live on a connection that is not open).
   * @internal
   */
  offline_(state: "offline" | "connecting" = "offline") {
    for (const s of this.scopes_) if (s.s_.state === "live" || s.s_.state === "catching-up") s.set_(s.copy_?.cursor ? "cached" : "loading");
    if (state === "connecting" || this.status.s_.state !== "error") this.setStatus_({ state });
  }

  // ---- the WebSocket session ----

  /** @internal */ connect_() {
    if (this.closed_) return;
    if (this.status.s_.transport === "poll") return pollAll(this);
    const Ctor = this.wsCtor_()!;
    const conn = ++this.conn_;
    this.welcomed_ = this.hi_ = false;
    this.sent_.clear();
    for (const s of this.scopes_) s.sub_ = "";
    if (this.status.s_.state !== "offline") this.offline_("connecting");
    let ws: WebSocket;
    let opened = false;
    try {
      ws = new Ctor(this.base_.replace(/^http/, "ws") + "/ws");
    } catch (e) {
      this.error_(e);
      return this.retry_(false);
    }
    this.ws_ = ws;
    this.deadline_(CONNECT_TIMEOUT);
    ws.onopen = async () => {
      if (conn !== this.conn_) return;
      opened = true;
      this.failedOpens_ = 0;
      try {
        // (JSON leaves out the fields that are undefined.)
        const hello = { type: "hello", origin: this.origin_, build: this.o_.build, token: this.o_.token && (this.lastToken_ = await this.o_.token()) };
        if (conn === this.conn_) this.send_(hello);
      } catch (e) {
        this.error_(e); // the token provider failed: retried with backoff
        if (conn === this.conn_) ws.close(4999);
      }
    };
    ws.onmessage = (ev: MessageEvent) => {
      if (conn === this.conn_) this.receive_(typeof ev.data === "string" ? ev.data : "");
    };
    ws.onclose = (ev: CloseEvent) => {
      if (conn !== this.conn_) return;
      this.detach_(); // frames of this socket still in the chain are dropped
      this.down_(ev.code, ev.reason, opened);
    };
  }

  /** @internal Closes the socket now as dead (no close handshake awaited): offline, and reconnect with backoff. */
  lost_(code: number, reason: string) {
    const ws = this.detach_();
    if (!ws) return;
    this.error_(new TideError("connection_lost", reason));
    ws.close(code, reason);
    this.down_(code, reason, false);
  }

  /** @internal (Re)arms the deadline by which the next frame must arrive, or the socket is treated as dead. */
  deadline_(ms: number) {
    const conn = this.conn_;
    clearTimeout(this.hb_);
    this.hb_ = setTimeout(() => conn === this.conn_ && this.lost_(4996, `no frame from the server for ${ms} ms`), ms);
  }

  /** @internal The socket is gone: count it against the mutations it carried, then reconnect (or stop, for a refusal). */
  down_(code: number, reason: string, opened: boolean) {
    clearTimeout(this.hb_);
    const wasWelcomed = this.hi_;
    this.welcomed_ = this.hi_ = false;
    if (opened && code !== 1006 && code < 4990 && !LIFECYCLE_CLOSES.includes(code)) {
      // The server closed a connection that carried these mutations before answering them: after 5 such, settle them.
      for (const it of this.replica_.log_)
        if (!it.acked && this.sent_.has(it.key) && (it.tries_ = (it.tries_ ?? 0) + 1) >= 5) {
          const error = new RejectError(it.key, "undeliverable", "the server closed 5 connections without answering");
          this.chain_ = this.chain_.then(() => this.onReject_(error));
          this.emit_({ type: "undeliverable", error });
        }
    }
    this.sent_.clear();
    for (const s of this.scopes_) s.sub_ = "";
    this.offline_();
    this.emit_({ type: "close", code, reason });
    if (!opened && ++this.failedOpens_ >= 3 && this.o_.transport === "auto") {
      // WebSockets look blocked: fall back to polling if it answers.
      return void this.probePoll_().then((ok) => (ok ? (this.setStatus_({ transport: "poll" }), this.connect_()) : this.retry_(false)));
    }
    switch (code) {
      case 4000:
        return this.fail_({ code: "unsupported_version", message: "this app is too old for the server: reload it" });
      case 1008:
        if (!this.o_.token || !wasWelcomed || this.refusedToken_ === this.lastToken_) {
          // Refused for good with these credentials: no scope keeps its data.
          const err = this.lastErr_ ?? { code: "unauthenticated", message: "not signed in" };
          this.fail_(err);
          for (const s of this.scopes_) this.chain_ = this.chain_.then(() => this.refuse_(s, err, false));
          return;
        }
        this.refusedToken_ = this.lastToken_;
        return this.retry_(false);
      case 4002:
        this.attempt_ = 0;
        return this.retry_(true);
    }
    this.retry_(false);
  }

  /** @internal */ fail_(err: Problem) {
    this.setStatus_({ state: "error", code: err.code, message: err.message });
    this.error_(new TideError(err.code, err.message, err.detail));
  }

  /** @internal */ retry_(atOnce: boolean) {
    if (this.closed_) return;
    this.offline_();
    clearTimeout(this.timer_);
    this.timer_ = setTimeout(() => this.connect_(), atOnce ? Math.random() * 250 : this.backoff_(this.attempt_++));
  }

  /** @internal */ send_(f: Frame) {
    const frame = { v: 1, ...f };
    this.emit_({ type: "frame-out", frame });
    try {
      this.ws_?.send(JSON.stringify(frame));
    } catch (e) {
      this.error_(e);
    }
  }

  /** @internal Feeds one server text frame to the client (the socket's onmessage). Never throws. */
  receive_(text: string) {
    if (this.welcomed_ && this.hbMs_) this.deadline_(2 * this.hbMs_); // any frame shows the connection is alive
    let f: ServerFrame;
    try {
      f = decodeServerFrame(text);
    } catch (e) {
      this.error_(e);
      this.ws_?.close(4998, "bad frame"); // loud: drop the connection, resume from stored cursors
      return;
    }
    this.emit_({ type: "frame-in", frame: f });
    if (f.type === "ping") return this.send_({ type: "pong" });
    if (f.type === "welcome") this.hi_ = true;
    const conn = this.conn_;
    this.chain_ = this.chain_
      .then(() => (conn === this.conn_ ? this.handle_(f, conn) : undefined))
      .catch((e: Error) => {
        this.error_(e);
        if (conn === this.conn_) this.ws_?.close(4998, "apply failed");
      });
  }

  /** @internal */ async handle_(f: ServerFrame, conn: number) {
    if ("topic" in f && f.topic !== undefined && (f.type !== "error" || f.topic)) return this.topics_.get(f.topic)?.apply_(f);
    switch (f.type) {
      case "welcome": {
        await this.bind_(f.principal); // before anything is shown or sent
        if (conn !== this.conn_) return;
        this.welcomed_ = true;
        this.hbMs_ = f.heartbeat_ms;
        if (f.heartbeat_ms) this.deadline_(2 * f.heartbeat_ms);
        else clearTimeout(this.hb_);
        const max = f.limits.max_frame_bytes;
        if (typeof max === "number" && max > 0 && max !== this.maxFrame_) void this.store_.setMeta("max_frame_bytes", String((this.maxFrame_ = max)));
        queueMicrotask(() => {
          for (const t of this.topics_.values()) t.join_();
        });
        this.attempt_ = 0;
        this.refusedToken_ = undefined;
        this.lastErr_ = undefined;
        this.setStatus_({ state: "catching-up" });
        for (const s of this.scopes_) this.subscribeScope_(s);
        this.flush_();
        return this.updateStatus_();
      }
      case "update-available":
        this.setStatus_({ updateAvailable: f.build });
        return this.emit_({ type: "update-available", build: f.build });
      case "refresh-token":
        if (this.o_.token) {
          void Promise.resolve(this.o_.token()).then(
            (t) => {
              if (conn !== this.conn_ || t === this.lastToken_) return;
              this.lastToken_ = t;
              this.send_({ type: "refresh", token: t });
            },
            (e: Error) => this.error_(e),
          );
        }
        return;
      case "ack":
        return this.onAck_(f);
      case "reject":
        return this.onReject_(new RejectError(f.key, f.code, f.message, f.detail));
      case "error":
        return this.onError_(f);
    }
    const s = this.bySub_((f as { id?: string }).id);
    if (s) await this.applyFrame_(s, f); // else a stale subscription's
  }

  /** @internal The scope of subscription id. */
  bySub_(id: string | undefined) {
    return [...this.scopes_].find((x) => x.sub_ !== "" && x.sub_ === id);
  }

  /** @internal */ async applyFrame_(s: Scope, f: ServerFrame) {
    const c = s.copy_!;
    const sub = s.sub_;
    // Whether the subscription ended (its connection too) while the store
    // was written: its scope then says cached, never live or catching-up.
    const gone = () => sub !== s.sub_ && this.status.s_.transport === "ws";
    const h = s.held_;
    if (f.type === "reset") {
      s.held_ = undefined;
      c.cursor = "";
      s.resetNext_ = true;
      await this.store_.saveScope(record(c, "", new Map()), true);
      c.base_ = new Map();
      this.refresh_(c.resources ?? [c.resource]);
      return;
    }
    if (f.type === "caught-up") {
      s.held_ = undefined;
      if (h || newer(f.cursor, c.cursor)) await this.saveBase_(s, h ? h[0] : c.base_, f.cursor, !!h?.[1]);
      if (gone()) return;
      s.set_("live");
      this.settle_();
      return this.updateStatus_();
    }
    if (f.type !== "changes") return;
    const reset = s.resetNext_;
    if (!reset && !newer(f.cursor, c.cursor)) return; // a duplicate or older delivery
    for (const e of f.entries)
      if (c.resources ? !c.resources.includes(e.resource ?? "") : e.resource && e.resource !== c.resource)
        throw new ProtocolError(`changes of ${c.resources ?? c.resource} carry ${e.resource}`);
    // Every entry is applied, those of this client's own origin too: the view
    // only changes (and notifies) where a row differs from what the ack landed.
    // A snapshot of several resources sends each resource's rows in turn: the
    // copy takes them all at its caught-up, never a comment before its todo.
    const next = applyBase(h ? h[0] : c.base_, !!reset, f.entries, c);
    const r = !!reset || !!h?.[1];
    s.resetNext_ = false;
    s.held_ = c.resources && f.cursor.startsWith("2s.") ? [next, r] : undefined;
    if (!s.held_) await this.saveBase_(s, next, f.cursor, r);
    if (s.s_.state !== "live" && !gone()) s.set_("catching-up");
    this.settle_();
  }

  /** @internal */ async saveBase_(s: Scope, next: Map<string, Row>, cursor: string, reset: boolean) {
    const c = s.copy_!;
    const sub = s.sub_;
    await this.store_.saveScope(record(c, cursor, next), reset);
    if (sub !== s.sub_ && this.status.s_.transport === "ws") return; // the subscription ended meanwhile: not installed
    c.base_ = next;
    c.cursor = cursor;
    c.refused_ = false;
    this.refresh_(c.resources ?? [c.resource]);
  }

  /** @internal */ settle_() {
    const done = this.replica_.settle_();
    for (const it of done) {
      this.forgotten_.add(it.key);
      void this.store_.deleteMutation(it.key);
      this.finish_(it.key);
    }
    if (done.length) {
      this.refresh_();
      this.pending_();
    }
  }

  /** @internal */ subscribeScope_(s: Scope): void {
    if (!s.loaded_ || s.stopped_) return;
    if (this.status.s_.transport === "poll") return pollScope(this, s);
    if (!this.welcomed_) return;
    s.sub_ = String(++this.subSeq_);
    s.held_ = undefined;
    // A scope of several resources names them in resources only, so a server without them refuses it.
    const cursor = s.copy_!.cursor;
    s.resetNext_ ||= !cursor; // without a cursor the copy starts empty
    if (s.s_.state !== "cached") s.set_("catching-up");
    this.send_({ type: "subscribe", id: s.sub_, ...names(s), conditions: s.conditions && Object.keys(s.conditions).length ? s.conditions : undefined, cursor: cursor || undefined });
  }

  /**
   * @internal Sends the unanswered mutations in seq order (after the
   * subscriptions), at most 32 awaiting an answer at a time: a long offline
   * queue must not exceed the frames the server takes at once, which it
   * would drop unanswered. Each answer sends the next.
   */
  flush_() {
    if (this.status.s_.transport === "poll") return void postAll(this);
    if (!this.welcomed_) return;
    let n = 0;
    for (const it of [...this.replica_.log_].sort((a, b) => a.seq - b.seq)) {
      if (it.acked) continue;
      if (!this.sent_.has(it.key)) {
        if (n >= 32) break;
        this.sent_.add(it.key);
        this.send_(frameOf(it));
      }
      n++;
    }
  }

  /** @internal */ async onAck_(f: { key: string; cursor: string; entries: Entry[]; replayed?: boolean }) {
    const { item, conflicts } = this.replica_.ack_(f.key, f.cursor, f.entries);
    if (!item) return;
    if (!this.forgotten_.has(item.key)) await this.store_.putMutation(item);
    let h = this.handles_.get(f.key);
    if (!h) this.handles_.set(f.key, (h = handle()));
    for (const c of conflicts) this.emit_({ type: "conflict", error: c });
    if (conflicts.length) h.r_.fail(conflicts[0]);
    else h.r_.ok({ key: f.key, cursor: f.cursor, entries: f.entries, replayed: !!f.replayed } satisfies Result);
    this.refresh_();
    this.pending_();
    this.settle_();
    this.flush_();
  }

  /** @internal A refusal of a queued mutation (a reject, or settled here): rolled back in every tab. */
  async onReject_(err: RejectError) {
    const key = err.key;
    if (RESEND_CODES.includes(err.code)) {
      // Resent later with the same key.
      this.sent_.delete(key);
      clearTimeout(this.timer_);
      this.timer_ = setTimeout(() => this.flush_(), 1000 + Math.random() * 1000);
      return;
    }
    this.forgotten_.add(key);
    if (!this.replica_.reject_(key)) return;
    await this.store_.deleteMutation(key);
    this.bc_?.postMessage(["reject", key, err.code, err.message, err.detail]); // rolled back in every tab
    this.finish_(key, err);
    this.refresh_();
    this.pending_();
    this.flush_();
  }

  /** @internal */ async onError_(f: { id?: string; code: string; message: string; detail?: string }): Promise<void> {
    const err = problemOf(f);
    this.error_(new TideError(f.code, f.message, f.detail));
    if (!f.id) {
      this.lastErr_ = err;
      return; // a connection error; a close follows if it is fatal
    }
    const s = this.bySub_(f.id);
    if (!s) return;
    s.sub_ = "";
    if (f.code === "invalid_cursor") {
      s.copy_!.cursor = "";
      return this.subscribeScope_(s);
    }
    if (f.code === "unauthenticated" && this.o_.token) return void this.ws_?.close(4997, "fresh credentials");
    if (FATAL_SUB_CODES.includes(f.code)) {
      await this.refuse_(s, err, true);
      return this.updateStatus_();
    }
    // Transient (internal, unavailable, too_many_subscriptions ...): shows its rows, subscribed again later.
    s.set_(s.copy_?.cursor ? "cached" : "loading");
    setTimeout(() => this.subscribeScope_(s), this.backoff_(5));
  }

  /** @internal */ async probePoll_(): Promise<boolean> {
    try {
      const { status } = await this.post_("/changes", { v: 1 });
      return status !== 404 && status < 500;
    } catch {
      return false;
    }
  }

  /**
   * @internal A polling request; principal is the response's Tide-Principal ("" when anonymous). Every request names the
   * device's origin: a mutation is scoped and tagged by it, and a poll gets the origin only on the entries this device wrote.
   */
  async post_(path: string, body: unknown): Promise<{ status: number; frame: ServerFrame; principal: string }> {
    const headers = { "Content-Type": "application/json", "Tide-Origin": this.origin_ };
    const res = await (this.o_.fetch ?? fetch)(this.base_ + path, { method: "POST", credentials: "same-origin", headers, body: JSON.stringify(body) });
    return { status: res.status, principal: res.headers.get("Tide-Principal") ?? "", frame: decodeServerFrame(await res.text()) };
  }
}
