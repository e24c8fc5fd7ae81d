// The replica: for each scope the server's rows at its cursor (base) and the
// log of landed and pending mutations on top; the view is the base with the
// log applied. The pure bookkeeping of client/replica.go, and the
// strategies that decide which row lands when an ack meets a local write.
import { ConflictError } from "./errors.js";
import { isObj, type Conditions, type Entry, type Row } from "./protocol.js";
import { matchesScope } from "./conditions.js";
import { newer } from "./cursor.js";

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

function resolve(s: Strategy, local: Row | null, base: Row | null, server: Row | null): Row | null {
  if (s === "server-wins") return server;
  if ("lastWriteWins" in s) {
    if (local === null || server === null) return server;
    const f = s.lastWriteWins || "updatedAt";
    const lc = local[f];
    const sc = server[f];
    return typeof lc === "number" && (typeof sc !== "number" || lc > sc) ? local : server;
  }
  const out = s.merge(local, base, server);
  if (out !== null && !isObj(out)) throw new Error("a merge returns a row or null");
  return out;
}

/** The name a strategy is persisted under (a merge is not persisted: "custom"). */
export const strategyName = (s: Strategy): string =>
  s === "server-wins" ? s : "lastWriteWins" in s ? "last-write-wins:" + (s.lastWriteWins || "updatedAt") : "custom";
const strategyFromName = (n: string): Strategy => (n.startsWith("last-write-wins:") ? { lastWriteWins: n.slice(16) } : "server-wins");

/** A row change in the log: an upsert of row, or a delete (row null). */
export interface Op {
  resource: string;
  key: string;
  row: Row | null;
}

/** One mutation in the log, as persisted in the offline queue. */
export interface LogItem {
  key: string;
  seq: number;
  resource: string;
  name: string;
  args: unknown;
  at: number;
  /** The strategy's persisted name. */
  strategy: string;
  ops: Op[];
  acked: boolean;
  cursor: string;
  /** The app's span, sent with the mutation. */
  traceparent?: string;
  /** @internal In memory: the strategy (a merge is not persisted). */
  run_?: Strategy;
  /** @internal In memory: connections the server closed after it was sent, before answering it. */
  tries_?: number;
}

/** The local copy of one scope. */
export interface ScopeCopy {
  digest: string;
  resource: string;
  /** A scope of several resources: all of them, sorted; rows are keyed resource + "\u0000" + key. */
  resources?: string[] | undefined;
  conditions: Conditions | undefined;
  base_: Map<string, Row>;
  cursor: string;
  view_: Map<string, Row>;
  /** The server refused the scope and nothing was applied since: it holds no mutation back from settling. */
  refused_?: boolean;
}

/** Whether sc follows resource r, and the key of r's row k in sc's rows. */
export const covers = (sc: ScopeCopy, r: string) => (sc.resources ? sc.resources.includes(r) : sc.resource === r);
export const rowKey = (sc: { resources?: string[] | undefined }, r: string, k: string) => (sc.resources ? r + "\u0000" + k : k);

function rowsEqual(a: Map<string, Row>, b: Map<string, Row>): boolean {
  if (a === b) return true;
  if (a.size !== b.size) return false;
  for (const [k, r] of a) {
    const o = b.get(k);
    if (o === undefined || (o !== r && JSON.stringify(o) !== JSON.stringify(r))) return false;
  }
  return true;
}

/** The row the last op of ops on (resource, key) leaves: undefined if none. */
export function lastOp(ops: Op[], resource: string, key: string): Row | null | undefined {
  for (let i = ops.length - 1; i >= 0; i--) if (ops[i]!.resource === resource && ops[i]!.key === key) return ops[i]!.row;
  return undefined;
}

const sorted = (m: Map<string, ScopeCopy>) => [...m.keys()].sort().map((d) => m.get(d)!);

/** The scopes' server rows and the mutation log on top (client/replica.go). */
export class Replica {
  scopes_ = new Map<string, ScopeCopy>();
  log_: LogItem[] = [];

  /** The row (resource, key) holds on top of the bases and items; null if absent. */
  lookup_(resource: string, key: string, items: LogItem[] = this.log_): Row | null {
    let v: Row | null = null;
    for (const sc of sorted(this.scopes_)) {
      const k = rowKey(sc, resource, key);
      if (covers(sc, resource) && sc.base_.has(k)) {
        v = sc.base_.get(k)!;
        break;
      }
    }
    for (const it of items) for (const op of it.ops) if (op.resource === resource && op.key === key) v = op.row;
    return v;
  }

  computeView_(sc: ScopeCopy): Map<string, Row> {
    if (sc.refused_) return new Map(); // a refused scope shows nothing, not even pending writes
    let view: Map<string, Row> | null = null;
    for (const it of this.log_)
      for (const op of it.ops) {
        if (!covers(sc, op.resource)) continue;
        view ??= new Map(sc.base_);
        const k = rowKey(sc, op.resource, op.key);
        if (op.row !== null && matchesScope(sc.conditions, op.row)) view.set(k, op.row);
        else view.delete(k);
      }
    return view ?? sc.base_;
  }

  /** Recomputes the views (of the resources', or all) and returns the scopes whose view changed. */
  refresh_(resources?: string[]): ScopeCopy[] {
    const changed: ScopeCopy[] = [];
    for (const sc of sorted(this.scopes_)) {
      if (resources && !resources.some((r) => covers(sc, r))) continue;
      const v = this.computeView_(sc);
      if (!rowsEqual(sc.view_, v)) changed.push(sc);
      sc.view_ = v;
    }
    return changed;
  }

  /** Reconciles an ack (see client/replica.go); returns the item, or null for a repeated ack, and the conflicts. */
  ack_(key: string, cursor: string, entries: Entry[]): { item: LogItem | null; conflicts: ConflictError[] } {
    const log = this.log_;
    const i = log.findIndex((it) => it.key === key);
    if (i >= 0 && log[i]!.acked) return { item: null, conflicts: [] };
    let it: LogItem;
    let at = i;
    if (i >= 0) it = log[i]!;
    else {
      it = { key, seq: 0, resource: "", name: "", args: {}, at: 0, strategy: "server-wins", ops: [], acked: false, cursor: "" };
      at = log.findIndex((x) => !x.acked);
      if (at < 0) at = log.length;
    }
    const prefix = log.slice(0, at);
    const rest = log.slice(i >= 0 ? at + 1 : at);
    const beneath = [...prefix, ...rest.filter((x) => x.acked)];
    let pos = beneath.length;
    while (pos > 0 && beneath[pos - 1]!.acked && newer(beneath[pos - 1]!.cursor, cursor)) pos--;
    const under = beneath.slice(0, pos);
    const strategy = it.run_ ?? strategyFromName(it.strategy);
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
        try {
          row = resolve(strategy, local, this.lookup_(resource, e.key, under), server);
        } catch (err) {
          conflicts.push(new ConflictError(key, resource, e.key, err));
          row = server;
        }
      }
      landed.push({ resource, key: e.key, row });
    }
    it.ops = [...it.ops.filter((op) => !named.has(op.resource + "\u0000" + op.key)), ...landed];
    it.acked = true;
    it.cursor = cursor;
    this.log_ = [...under, it, ...beneath.slice(pos), ...rest.filter((x) => !x.acked)];
    return { item: it, conflicts };
  }

  /** Takes key's pending write out of the log; null if unknown or landed. */
  reject_(key: string): LogItem | null {
    const i = this.log_.findIndex((it) => it.key === key);
    if (i < 0 || this.log_[i]!.acked) return null;
    return this.log_.splice(i, 1)[0]!;
  }

  /** Drops the landed items whose ack cursor every scope of their resources (but a refused one) has reached. */
  settle_(): LogItem[] {
    const done: LogItem[] = [];
    this.log_ = this.log_.filter((it) => {
      if (!it.acked) return true;
      const res = [it.resource, ...it.ops.map((o) => o.resource)].filter((r) => r !== "");
      for (const sc of this.scopes_.values()) if (!sc.refused_ && res.some((r) => covers(sc, r)) && newer(it.cursor, sc.cursor)) return true;
      done.push(it);
      return false;
    });
    return done;
  }
}

/** applyBase returns base with one server batch applied (a new map); a scope of several resources keys rows by resource too. */
export function applyBase(base: Map<string, Row>, reset: boolean, entries: Entry[], sc: { resources?: string[] | undefined } = {}): Map<string, Row> {
  const next = reset ? new Map<string, Row>() : new Map(base);
  for (const e of entries) {
    const k = rowKey(sc, e.resource ?? "", e.key);
    if (e.op === "upsert") next.set(k, e.row!);
    else next.delete(k);
  }
  return next;
}
