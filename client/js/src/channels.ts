// App channels: topics and presence (docs/channels.md). A topic is an app
// channel the server declared: ephemeral messages, and optionally who is
// subscribed (presence). Topics are joined on every connection until left;
// messages sent while offline are not delivered later.
import { problemOf, type Member, type ServerFrame } from "./protocol.js";
import type { Client } from "./client.js";
import type { Problem } from "./errors.js";
import { Subscribable } from "./subscribable.js";

/** A topic's state for a UI: its presence list (S: the type of each member's state) and the last refusal. */
export interface TopicSnapshot<S = unknown> {
  members: Member<S>[];
  error?: Problem;
}

/** A joined topic; M is its message type, P its presence state type. Bind a UI with subscribe/getSnapshot, like Scope. */
export class Topic<M = unknown, P = unknown> extends Subscribable<TopicSnapshot<P>> {
  /** @internal */ members_ = new Map<string, Member>();
  /** @internal */ handlers_ = new Set<{ f(data: M, from: string): void }["f"]>();
  /** @internal */ left_?: boolean;

  /** @internal */
  constructor(
    /** @internal */ public client_: Client,
    readonly name: string,
    /** @internal */ public state_: unknown,
  ) {
    super({ members: [] });
  }

  /** Calls fn with every message of the topic; returns its remover. */
  onMessage(fn: (data: M, from: string) => void): () => void {
    this.handlers_.add(fn);
    return () => this.handlers_.delete(fn);
  }

  /** Sends data to every subscriber; false when offline (nothing is queued). */
  publish(data: M): boolean {
    return this.wire_({ type: "publish", topic: this.name, data });
  }

  /** Replaces this client's presence state: sent now, and on every rejoin. */
  setState(state: P) {
    this.state_ = state;
    this.wire_({ type: "presence-update", topic: this.name, state });
  }

  /** Unsubscribes and forgets the topic. */
  leave() {
    if (this.left_) return;
    this.left_ = true;
    this.client_.topics_.delete(this.name);
    this.wire_({ type: "topic-unsubscribe", topic: this.name });
  }

  /** @internal */
  join_() {
    this.wire_({ type: "topic-subscribe", topic: this.name, state: this.state_ });
  }

  /** @internal */
  wire_(f: { [k: string]: unknown }): boolean {
    const c = this.client_;
    if (this.left_ && f.type !== "topic-unsubscribe") return false;
    if (c.welcomed_) c.send_(f);
    return !!c.welcomed_;
  }

  /** @internal */
  apply_(f: ServerFrame) {
    if (f.type === "message") {
      for (const h of this.handlers_) h(f.data as M, f.from ?? "");
      return;
    }
    const m = this.members_;
    if (f.type === "presence") {
      m.clear();
      for (const x of f.members) m.set(x.id, x);
    } else if (f.type === "presence-diff") {
      for (const x of f.leaves) m.delete(x.id);
      for (const x of f.joins) m.set(x.id, x);
    } else if (f.type === "error") {
      if (f.code !== "duplicate_subscription") this.put_({ ...this.s_, error: problemOf(f) });
      return;
    } else return;
    this.put_({ members: [...m.values()] as Member<P>[] });
  }
}
