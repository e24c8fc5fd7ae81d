// The client: its scopes, the mutation log and offline queue, the store,
// and the session over a WebSocket (or HTTP polling, see poll.ts).
import { canonicalConditions } from "./conditions.js";
import { newer } from "./cursor.js";
import { ConflictError, RejectError } from "./errors.js";
import { decodeServerFrame, ProtocolError, type Conditions, type Entry, type Row, type ServerFrame } from "./protocol.js";
import { applyBase, Replica, strategyName, type LogItem, type ScopeCopy } from "./replica.js";
import { indexedDBStore, memoryStore, type Store } from "./storage.js";
import { digestOf, FATAL_SUB_CODES, names, randomHex, record, Scope, type ScopeState } from "./scope.js";
import { frameOf, handle, localOps, type Handle, type MutateOptions, type Mutation, type Result } from "./queue.js";
import { Topic } from "./channels.js";
import { Subscribable } from "./subscribable.js";
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
  | { type: "close"; code: number; reason: string };

/** createClient's options. */
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

/** Creates a client; it connects at once and reconnects until close(). */
export function createClient(opts: Options = {}): Client {
  return new Client(opts);
}

const RESEND_CODES = ["unavailable", "draining"];

/** A tide client: scopes, mutations and topics over one connection. */
export class Client {
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
  /** @internal */ ws_: WebSocket | null = null;
  /** @internal The connection number, for stale callbacks. */ conn_ = 0;
  /** @internal */ welcomed_ = false;
  /** @internal */ attempt_ = 0;
  /** @internal */ failedOpens_ = 0;
  /** @internal */ subSeq_ = 0;
  /** @internal */ seq_ = 0;
  /** @internal Frames are applied one at a time, in order. */ chain_: Promise<void> = Promise.resolve();
  /** @internal */ timer_: ReturnType<typeof setTimeout> | undefined;
  /** @internal */ closed_ = false;
  /** @internal */ lastToken_ = "";
  /** @internal */ refusedToken_: string | null = null;
  /** @internal */ lastCode_ = "";
  /** @internal Keys sent on this connection. */ sent_ = new Set<string>();
  /** @internal */ bc_: BroadcastChannel | null = null;
  /** @internal */ started_: Promise<void>;
  /** @internal Keys this tab settled or saw rejected: never taken from the store again. */ forgotten_ = new Set<string>();
  /** @internal */ posting_ = false;

  /** @internal */
  constructor(opts: Options) {
    const o = (this.o_ = { pollInterval: 2000, minBackoff: 100, maxBackoff: 30000, transport: "auto", ...opts });
    this.base_ = new URL(opts.url ?? "/tide", globalThis.location?.href ?? "http://localhost/").href.replace(/\/$/, "");
    const s = opts.store;
    const storeP =
      typeof s === "object"
        ? Promise.resolve(s)
        : s === "memory" || typeof indexedDB === "undefined"
          ? Promise.resolve(memoryStore())
          : indexedDBStore(opts.dbName).catch((e: Error) => {
              this.emit_({ type: "error", error: e });
              return memoryStore(); // IndexedDB unavailable (private mode ...): memory
            });
    if ((o.transport === "auto" && !this.wsCtor_()) || o.transport === "poll") this.setStatus_({ transport: "poll" });
    this.started_ = this.start_(storeP);
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

  /** @internal */ setStatus_(s: Partial<Status>) {
    const old = this.status.s_;
    const n: { -readonly [K in keyof Status]: Status[K] } = { ...old, ...s };
    if (n.state !== "error") delete n.code, delete n.message;
    const keys = Object.keys(n) as (keyof Status)[];
    if (keys.length !== Object.keys(old).length || keys.some((k) => n[k] !== old[k])) this.status.put_(n);
  }

  /** @internal */ async start_(storeP: Promise<Store>) {
    const store = (this.store_ = await storeP);
    this.origin_ = await store.meta("origin", () => "web-" + randomHex().slice(0, 16));
    if (typeof BroadcastChannel !== "undefined") {
      this.bc_ = new BroadcastChannel("tide:" + (this.o_.dbName ?? "tide"));
      this.bc_.onmessage = (ev: MessageEvent) => {
        const m = typeof ev.data === "string" ? ev.data : "";
        if (m.startsWith("rejected:")) void (this.chain_ = this.chain_.then(() => this.dropRejected_(m.slice(9))));
        else void this.loadQueue_();
      };
    }
    await this.loadQueue_();
    if (this.o_.resume !== false) for (const r of (await store.listScopes?.()) ?? []) this.scope(r.resources ?? r.resource, r.conditions);
    this.connect_();
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
    const items = (await this.store_.loadQueue()).sort((a, b) => a.seq - b.seq);
    let got = false;
    for (const it of items) {
      if (this.forgotten_.has(it.key) || this.replica_.log_.some((x) => x.key === it.key)) continue;
      this.insert_(it);
      this.seq_ = Math.max(this.seq_, it.seq);
      got = true;
    }
    if (got) {
      this.changed_(this.replica_.refresh_());
      this.settle_();
      this.flush_();
    }
  }

  /** @internal Another tab's send of key was rejected: roll it back here too (it is out of the store). */
  dropRejected_(key: string) {
    this.forgotten_.add(key);
    if (!this.replica_.reject_(key)) return;
    this.finish_(key, new RejectError(key, "rejected", "rejected in another tab"));
    this.changed_(this.replica_.refresh_());
    this.pending_();
  }

  /** @internal Settles key's handle: rejected with err, or settled. */
  finish_(key: string, err?: Error) {
    const h = this.handles_.get(key);
    this.handles_.delete(key);
    if (err) h?.result.fail(err);
    h?.settled.ok();
  }

  /** @internal */ insert_(it: LogItem) {
    const log = this.replica_.log_;
    if (it.acked) {
      const i = log.findIndex((x) => !x.acked);
      log.splice(i < 0 ? log.length : i, 0, it);
    } else log.push(it);
    this.handles_.set(it.key, handle());
    this.pending_();
  }

  /**
   * Starts syncing a scope (the same scope twice returns the same Scope):
   * one resource, or several sharing the conditions' columns under one
   * cursor, whose transactions arrive whole. The scope is followed until
   * forget: a client started again on the same store resumes it.
   */
  scope(resource: string | string[], conditions?: Conditions): Scope {
    const list = [...new Set(typeof resource === "string" ? [resource] : resource)].sort();
    if (!list.length) throw new Error("tide: a scope needs a resource");
    const cj = canonicalConditions(conditions);
    const key = list.join("\u0000") + "\u0000" + cj;
    for (const s of this.scopes_) if ((s.resources ?? [s.resource]).join("\u0000") + "\u0000" + canonicalConditions(s.conditions) === key) return s;
    const s = new Scope(this, list[0]!, conditions, cj, list.length > 1 ? list : undefined);
    this.scopes_.add(s);
    return s;
  }

  /** The scopes this client follows, those resumed from the store included. */
  async followed(): Promise<Scope[]> {
    await this.started_.catch(() => {});
    return [...this.scopes_];
  }

  /** Stops following s for good: it is closed and its stored copy deleted. */
  async forget(s: Scope) {
    s.close();
    await s.ready_;
    if (s.copy_) await this.store_.deleteScope?.(s.copy_.digest);
  }

  /** Joins a topic (or returns the one joined), with a presence state. */
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
    await this.started_.catch(() => {});
    const digest = await digestOf(s.resources ?? [s.resource], condJSON);
    const rec = await this.store_.loadScope(digest);
    if (!this.scopes_.has(s)) return;
    const base = new Map(Object.entries(rec?.rows ?? {}));
    const copy: ScopeCopy = { digest, resource: s.resource, resources: s.resources, conditions: s.conditions, base_: base, cursor: rec?.cursor ?? "", view_: base };
    s.copy_ = copy;
    this.replica_.scopes_.set(digest, copy);
    copy.view_ = this.replica_.computeView_(copy);
    s.set_(rec ? "cached" : "loading");
    this.subscribeScope_(s);
  }

  /** @internal */
  drop_(s: Scope) {
    this.scopes_.delete(s);
    if (s.copy_) this.replica_.scopes_.delete(s.copy_.digest);
    if (s.sub_ && this.ws_ && this.welcomed_) this.send_({ type: "unsubscribe", id: s.sub_ });
    s.sub_ = "";
    clearTimeout(s.pollTimer_);
  }

  /** Pending (unsettled) mutations, oldest first. */
  get pendingKeys(): string[] {
    return this.replica_.log_.map((it) => it.key);
  }

  /** @internal */ pending_() {
    this.setStatus_({ pending: this.replica_.log_.length });
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
    if (this.replica_.log_.some((x) => x.key === key)) throw new Error(`tide: mutation ${key} is already pending`);
    const tp = mo.traceparent;
    if (tp !== undefined && (tp.length > 128 || /[\x00-\x1f\x7f]/.test(tp))) throw new Error("tide: a traceparent is at most 128 bytes without control characters");
    const ops = localOps(this.replica_, mo.local);
    this.seq_ = Math.max(this.seq_ + 1, Date.now() * 1000);
    const strategy = mo.strategy ?? "server-wins";
    const it: LogItem = { key, seq: this.seq_, resource, name, args, at: Date.now(), strategy: strategyName(strategy), ops, acked: false, cursor: "", run_: strategy };
    if (tp) it.traceparent = tp;
    this.insert_(it);
    this.changed_(this.replica_.refresh_([resource, ...ops.map((o) => o.resource)]));
    const h = this.handles_.get(key)!;
    const queued = this.started_.then(() => this.store_.putMutation(it));
    queued.then(
      () => (this.bc_?.postMessage("queue"), this.flush_()),
      (e: Error) => this.emit_({ type: "error", error: e }),
    );
    return { key, queued, result: h.result.p, settled: h.settled.p };
  }

  /** Reconnects at once: after an error state (new credentials), or to skip a backoff wait. */
  reconnect() {
    if (this.closed_) return;
    clearTimeout(this.timer_);
    this.setStatus_({ state: "connecting" });
    this.detach_()?.close(1000);
    this.attempt_ = 0;
    this.refusedToken_ = null;
    void this.started_.then(() => this.connect_());
  }

  /** Ends the connection and every timer; stored data stays. */
  close() {
    this.closed_ = true;
    clearTimeout(this.timer_);
    for (const s of this.scopes_) clearTimeout(s.pollTimer_);
    this.bc_?.close();
    this.detach_()?.close(1000);
  }

  /** @internal Forgets the current socket (its later events are ignored) and returns it. */
  detach_(): WebSocket | null {
    const ws = this.ws_;
    this.ws_ = null;
    this.conn_++;
    return ws;
  }

  /** @internal */ changed_(scs: ScopeCopy[]) {
    for (const s of this.scopes_) if (s.copy_ && scs.includes(s.copy_)) s.set_();
  }

  /** @internal */ updateStatus_() {
    const st = this.status.s_;
    if (st.state === "error") return;
    if (!(st.transport === "poll" ? this.failedOpens_ === 0 : this.welcomed_)) return;
    this.setStatus_({ state: [...this.scopes_].every((s) => s.stopped_ || s.s_.state === "live") ? "live" : "catching-up" });
  }

  // ---- the WebSocket session ----

  /** @internal */ connect_() {
    if (this.closed_) return;
    if (this.status.s_.transport === "poll") return pollAll(this);
    const Ctor = this.wsCtor_()!;
    const conn = ++this.conn_;
    this.welcomed_ = false;
    this.sent_.clear();
    for (const s of this.scopes_) s.sub_ = "";
    if (this.status.s_.state !== "offline") this.setStatus_({ state: "connecting" });
    let ws: WebSocket;
    let opened = false;
    try {
      ws = new Ctor(this.base_.replace(/^http/, "ws") + "/ws");
    } catch (e) {
      this.emit_({ type: "error", error: e as Error });
      return this.retry_(false);
    }
    this.ws_ = ws;
    ws.onopen = async () => {
      if (conn !== this.conn_) return;
      opened = true;
      this.failedOpens_ = 0;
      try {
        const hello: Frame = { type: "hello", origin: this.origin_ };
        if (this.o_.build) hello.build = this.o_.build;
        if (this.o_.token) hello.token = this.lastToken_ = await this.o_.token();
        if (conn === this.conn_) this.send_(hello);
      } catch (e) {
        this.emit_({ type: "error", error: e as Error }); // the token provider failed: retried with backoff
        if (conn === this.conn_) ws.close(4999);
      }
    };
    ws.onmessage = (ev: MessageEvent) => {
      if (conn === this.conn_) this.receive_(typeof ev.data === "string" ? ev.data : "");
    };
    ws.onclose = (ev: CloseEvent) => {
      if (conn !== this.conn_) return;
      this.ws_ = null;
      const wasWelcomed = this.welcomed_;
      this.welcomed_ = false;
      for (const s of this.scopes_) s.sub_ = "";
      this.emit_({ type: "close", code: ev.code, reason: ev.reason });
      if (!opened && ++this.failedOpens_ >= 3 && this.o_.transport === "auto") {
        // WebSockets look blocked: fall back to polling if it answers.
        return void this.probePoll_().then((ok) => (ok ? (this.setStatus_({ transport: "poll" }), this.connect_()) : this.retry_(false)));
      }
      switch (ev.code) {
        case 4000:
          return this.fail_("unsupported_version", "the server does not speak this client's protocol version: update the client");
        case 1008:
          if (!this.o_.token || !wasWelcomed || this.refusedToken_ === this.lastToken_) {
            return this.fail_(this.lastCode_ || "unauthenticated", "refused by policy (close 1008); not retrying with the same credentials");
          }
          this.refusedToken_ = this.lastToken_;
          return this.retry_(false);
        case 4002:
          this.attempt_ = 0;
          return this.retry_(true);
      }
      this.retry_(false);
    };
  }

  /** @internal */ fail_(code: string, message: string) {
    this.setStatus_({ state: "error", code, message });
    this.emit_({ type: "error", error: new Error(`tide: ${code}: ${message}`) });
  }

  /** @internal */ retry_(atOnce: boolean) {
    if (this.closed_) return;
    this.setStatus_({ state: "offline" });
    const cap = atOnce ? 250 : Math.min(this.o_.maxBackoff, this.o_.minBackoff * 2 ** this.attempt_++);
    clearTimeout(this.timer_);
    this.timer_ = setTimeout(() => this.connect_(), Math.random() * cap);
  }

  /** @internal */ send_(f: Frame) {
    const frame = { v: 1, ...f };
    this.emit_({ type: "frame-out", frame });
    try {
      this.ws_?.send(JSON.stringify(frame));
    } catch (e) {
      this.emit_({ type: "error", error: e as Error });
    }
  }

  /** @internal Feeds one server text frame to the client (the socket's onmessage). Never throws. */
  receive_(text: string) {
    let f: ServerFrame;
    try {
      f = decodeServerFrame(text);
    } catch (e) {
      this.emit_({ type: "error", error: e as Error });
      this.ws_?.close(4998, "bad frame"); // loud: drop the connection, resume from stored cursors
      return;
    }
    this.emit_({ type: "frame-in", frame: f });
    const conn = this.conn_;
    this.chain_ = this.chain_
      .then(() => (conn === this.conn_ ? this.handle_(f) : undefined))
      .catch((e: Error) => {
        this.emit_({ type: "error", error: e });
        if (conn === this.conn_) this.ws_?.close(4998, "apply failed");
      });
  }

  /** @internal */ async handle_(f: ServerFrame) {
    if ("topic" in f && f.topic !== undefined && (f.type !== "error" || f.topic)) return this.topics_.get(f.topic)?.apply_(f);
    switch (f.type) {
      case "welcome":
        this.welcomed_ = true;
        queueMicrotask(() => {
          for (const t of this.topics_.values()) t.join_();
        });
        this.attempt_ = 0;
        this.refusedToken_ = null;
        this.setStatus_({ state: "catching-up" });
        for (const s of this.scopes_) if (s.copy_) this.subscribeScope_(s);
        this.flush_();
        return this.updateStatus_();
      case "update-available":
        this.setStatus_({ updateAvailable: f.build });
        return this.emit_({ type: "update-available", build: f.build });
      case "refresh-token":
        if (this.o_.token) {
          const conn = this.conn_;
          void Promise.resolve(this.o_.token()).then(
            (t) => {
              if (conn !== this.conn_ || t === this.lastToken_) return;
              this.lastToken_ = t;
              this.send_({ type: "refresh", token: t });
            },
            (e: Error) => this.emit_({ type: "error", error: e }),
          );
        }
        return;
      case "ack":
        return this.onAck_(f);
      case "reject":
        return this.onReject_(f);
      case "error":
        return this.onError_(f);
    }
    const s = [...this.scopes_].find((x) => x.sub_ !== "" && x.sub_ === f.id);
    if (s) await this.applyFrame_(s, f); // else a stale subscription's
  }

  /** @internal */ async applyFrame_(s: Scope, f: ServerFrame) {
    const c = s.copy_!;
    if (f.type === "reset") {
      c.cursor = "";
      s.resetNext_ = true;
      await this.store_.saveScope(record(c, "", new Map()), true);
      c.base_ = new Map();
      this.changed_(this.replica_.refresh_(c.resources ?? [c.resource]));
      return;
    }
    if (f.type === "caught-up") {
      if (newer(f.cursor, c.cursor)) await this.saveBase_(s, c.base_, f.cursor, false);
      s.set_("live");
      this.settle_();
      return this.updateStatus_();
    }
    if (f.type !== "changes") return;
    const reset = s.resetNext_;
    if (!reset && !newer(f.cursor, c.cursor)) return; // a duplicate or older delivery
    for (const e of f.entries)
      if (c.resources ? !c.resources.includes(e.resource ?? "") : e.resource && e.resource !== c.resource)
        throw new ProtocolError(`changes of subscription ${f.id ?? ""} carry resource ${JSON.stringify(e.resource)}, not ${c.resources ?? c.resource}`);
    await this.saveBase_(s, applyBase(c.base_, reset, f.entries, c), f.cursor, reset);
    s.resetNext_ = false;
    if (s.s_.state !== "live") s.set_("catching-up");
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
    this.changed_(this.replica_.refresh_(c.resources ?? [c.resource]));
  }

  /** @internal */ settle_() {
    const done = this.replica_.settle_();
    for (const it of done) {
      this.forgotten_.add(it.key);
      void this.store_.deleteMutation(it.key);
      this.finish_(it.key);
    }
    if (done.length) {
      this.changed_(this.replica_.refresh_());
      this.pending_();
    }
  }

  /** @internal */ subscribeScope_(s: Scope) {
    if (!s.copy_ || s.stopped_) return;
    if (this.status.s_.transport === "poll") return pollScope(this, s);
    if (!this.welcomed_ || !this.ws_) return;
    s.sub_ = String(++this.subSeq_);
    // A scope of several resources names them in resources only, so a server without them refuses it.
    const f: Frame = { type: "subscribe", id: s.sub_, ...names(s) };
    if (s.conditions && Object.keys(s.conditions).length) f.conditions = s.conditions;
    if (s.copy_.cursor) f.cursor = s.copy_.cursor;
    else s.resetNext_ = true; // without a cursor the copy starts empty
    if (s.s_.state !== "cached") s.set_("catching-up");
    this.send_(f);
  }

  /** @internal Sends the unanswered mutations in seq order (after the subscriptions). */
  flush_() {
    if (this.status.s_.transport === "poll") return void postAll(this);
    if (!this.welcomed_ || !this.ws_) return;
    for (const it of [...this.replica_.log_].sort((a, b) => a.seq - b.seq)) {
      if (it.acked || this.sent_.has(it.key)) continue;
      this.sent_.add(it.key);
      this.send_(frameOf(it));
    }
  }

  /** @internal */ async onAck_(f: { key: string; cursor: string; entries: Entry[]; replayed?: boolean }) {
    const { item, conflicts } = this.replica_.ack_(f.key, f.cursor, f.entries);
    if (!item) return;
    if (!this.forgotten_.has(item.key)) await this.store_.putMutation(item);
    let h = this.handles_.get(f.key);
    if (!h) this.handles_.set(f.key, (h = handle()));
    for (const c of conflicts) this.emit_({ type: "conflict", error: c });
    if (conflicts.length) h.result.fail(conflicts[0]);
    else h.result.ok({ key: f.key, cursor: f.cursor, entries: f.entries, replayed: !!f.replayed } satisfies Result);
    this.changed_(this.replica_.refresh_());
    this.pending_();
    this.settle_();
  }

  /** @internal */ async onReject_(f: { key: string; code: string; message: string }) {
    if (RESEND_CODES.includes(f.code)) {
      // Resent later with the same key.
      this.sent_.delete(f.key);
      clearTimeout(this.timer_);
      this.timer_ = setTimeout(() => this.flush_(), 1000 + Math.random() * 1000);
      return;
    }
    if (!this.replica_.reject_(f.key)) return;
    this.forgotten_.add(f.key);
    await this.store_.deleteMutation(f.key);
    this.bc_?.postMessage("rejected:" + f.key);
    this.finish_(f.key, new RejectError(f.key, f.code, f.message));
    this.changed_(this.replica_.refresh_());
    this.pending_();
  }

  /** @internal */ onError_(f: { id?: string; code: string; message: string }) {
    this.emit_({ type: "error", error: new Error(`tide: ${f.code}: ${f.message}`) });
    if (!f.id) {
      this.lastCode_ = f.code;
      return; // a connection error; a close follows if it is fatal
    }
    const s = [...this.scopes_].find((x) => x.sub_ !== "" && x.sub_ === f.id);
    if (!s) return;
    s.sub_ = "";
    if (f.code === "invalid_cursor") {
      s.copy_!.cursor = "";
      return this.subscribeScope_(s);
    }
    if (f.code === "unauthenticated" && this.o_.token) return void this.ws_?.close(4997, "fresh credentials");
    const err = { code: f.code, message: f.message };
    if (FATAL_SUB_CODES.includes(f.code)) {
      s.stopped_ = true;
      s.set_("error", err);
      if (s.copy_) {
        s.copy_.refused_ = true; // it brings nothing until allowed again
        this.settle_();
      }
      return this.updateStatus_();
    }
    // Transient (internal, unavailable, too_many_subscriptions ...): try again later.
    s.set_("error", err);
    setTimeout(() => this.subscribeScope_(s), Math.random() * Math.min(this.o_.maxBackoff, this.o_.minBackoff * 2 ** 5));
  }

  /** @internal */ async probePoll_(): Promise<boolean> {
    try {
      const { status } = await this.post_("/changes", { v: 1 });
      return status !== 404 && status < 500;
    } catch {
      return false;
    }
  }

  /** @internal */ async post_(path: string, body: unknown, headers: { [k: string]: string } = {}): Promise<{ status: number; frame: ServerFrame }> {
    const res = await (this.o_.fetch ?? fetch)(this.base_ + path, { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json", ...headers }, body: JSON.stringify(body) });
    return { status: res.status, frame: decodeServerFrame(await res.text()) };
  }
}

export type { ScopeState };
