// A synced scope as the app sees it: rows and state as a subscribe/getSnapshot pair.
import type { Conditions, Row } from "./protocol.js";
import type { ScopeCopy } from "./replica.js";
import type { ScopeRecord } from "./storage.js";
import type { Client } from "./client.js";
import type { Problem } from "./errors.js";
import { Subscribable } from "./subscribable.js";

/** A scope's state: loading (nothing yet), cached (rows from the store), catching-up, live, error. */
export type ScopeState = "loading" | "cached" | "catching-up" | "live" | "error";

/** What a scope's subscribe/getSnapshot pair hands the UI; R is the row type (with a schema: the resource's row). */
export interface ScopeSnapshot<R extends Row = Row> {
  readonly rows: readonly R[];
  readonly byKey: ReadonlyMap<string, R>;
  readonly state: ScopeState;
  /** Why the scope is in state error: code, message (presentable) and detail (for developers). */
  readonly error?: Problem;
}

/** The stored form of a scope's copy with the given cursor and rows. */
export const record = (c: ScopeCopy, cursor: string, rows: Map<string, Row>): ScopeRecord => ({
  digest: c.digest,
  resource: c.resource,
  resources: c.resources,
  conditions: c.conditions,
  cursor,
  rows: Object.fromEntries(rows),
});

/** Codes that refuse a scope for good: it is not subscribed again until retried. */
export const FATAL_SUB_CODES = ["forbidden", "unknown_resource", "invalid_conditions", "too_many_conditions", "bad_frame"];

/** A scope's resources, as a subscribe frame or poll request names them. */
export const names = (s: Scope) => (s.resources ? { resources: s.resources } : { resource: s.resource });

const hex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
export const randomHex = () => hex(crypto.getRandomValues(new Uint8Array(16)));

/** A scope's digest: its store key, as the Go client computes it. */
export async function digestOf(names: string[], condJSON: string): Promise<string> {
  const head = names.length > 1 ? "tide-scopes-v1\u0000" + names.join("\u0000") : "tide-scope-v1\u0000" + names[0];
  return hex(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(head + "\u0000" + (condJSON || "{}")))));
}

/** A synced scope: its rows and state as a subscribe/getSnapshot pair; R is the row type. */
export class Scope<R extends Row = Row> extends Subscribable<ScopeSnapshot<R>> {
  /** @internal */ copy_: ScopeCopy | null = null;
  /** @internal Its stored record was loaded: it may be subscribed. */ loaded_?: boolean;
  /** @internal The current subscription id. */ sub_ = "";
  /** @internal Refused for good (forbidden, unknown_resource ...). */ stopped_?: boolean;
  /** @internal */ resetNext_?: boolean;
  /** @internal A snapshot of several resources, held until its caught-up: the rows so far, and whether it began with a reset. */ held_?: [Map<string, Row>, boolean];
  /** @internal */ ready_: Promise<void>;
  /** @internal */ pollTimer_: ReturnType<typeof setTimeout> | undefined;

  /** @internal */
  constructor(
    /** @internal */ public client_: Client,
    /** @internal Its resources and canonical conditions: what makes two scopes the same. */ public key_: string,
    readonly resource: string,
    readonly conditions: Conditions | undefined,
    condJSON: string,
    /** A scope of several resources: all of them, sorted. */
    readonly resources?: string[],
  ) {
    super({ rows: [], byKey: new Map(), state: "loading" });
    this.ready_ = client_.open_(this, condJSON);
  }

  /** The rows of one of the scope's resources (a scope of several). */
  rowsOf(resource: string): Row[] {
    return [...(this.copy_?.view_ ?? [])].filter(([k]) => !this.resources || k.startsWith(resource + "\u0000")).map(([, r]) => r);
  }

  /** @internal Publishes a new snapshot if the rows or the state changed. */
  set_(state?: ScopeState, error?: Problem) {
    const snap = this.s_;
    const view = this.copy_?.view_ ?? new Map<string, Row>();
    const st = state ?? snap.state;
    const err = st === "error" ? (error ?? snap.error) : undefined;
    if (view !== (snap.byKey as ReadonlyMap<string, Row>) || st !== snap.state || err !== snap.error) this.put_({ rows: [...view.values()] as R[], byKey: view as Map<string, R>, state: st, ...(err ? { error: err } : {}) });
  }

  /**
   * Subscribes the scope again from no cursor, on this same object: after
   * an error (access granted again), or to resync. A refused scope stays
   * refused until retried.
   */
  retry = () => this.client_.resubscribe_(this);

  /** Stops syncing the scope in this client (its stored copy stays). */
  close() {
    this.client_.drop_(this);
  }
}
