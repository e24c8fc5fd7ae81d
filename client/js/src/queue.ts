// Mutations: what the app passes and gets back, the local transaction that
// applies one optimistically, and the frame a queued mutation is sent as.
import { isObj, type Entry, type Row } from "./protocol.js";
import { lastOp, type LogItem, type Op, type Replica, type Strategy } from "./replica.js";

/** The local side of a mutation: read rows (pending writes applied) and write whole rows. */
export interface LocalTx {
  get(resource: string, key: string): Row | null;
  upsert(resource: string, key: string, row: Row): void;
  delete(resource: string, key: string): void;
}

/** How a mutation runs. */
export interface MutateOptions {
  /** Changes the local copy at once (optimistically). */
  local?: (tx: LocalTx) => void;
  /** Which row lands when the server's answer meets a local write; default "server-wins". */
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

export type Deferred<T> = { p: Promise<T>; ok: (v: T) => void; fail: (e: unknown) => void };
export function deferred<T>(): Deferred<T> {
  let ok!: (v: T) => void, fail!: (e: unknown) => void;
  const p = new Promise<T>((a, b) => ((ok = a), (fail = b)));
  p.catch(() => {});
  return { p, ok, fail };
}

/** What the client keeps for a pending mutation: its result and settled promises. */
export type Handle = { r_: Deferred<Result>; s_: Deferred<void> };
export const handle = (): Handle => ({ r_: deferred(), s_: deferred() });

const clone = <T>(x: T): T => JSON.parse(JSON.stringify(x)) as T;

/** Runs a mutation's local function against the replica; returns its row ops. */
export function localOps(r: Replica, local: ((tx: LocalTx) => void) | undefined): Op[] {
  const ops: Op[] = [];
  local?.({
    get: (res, k) => {
      const op = lastOp(ops, res, k);
      const row = op !== undefined ? op : r.lookup_(res, k);
      return row && clone(row);
    },
    upsert: (res, k, row) => {
      if (!isObj(row)) throw new Error("tide: a row is an object");
      ops.push({ resource: res, key: k, row: clone(row) });
    },
    delete: (res, k) => void ops.push({ resource: res, key: k, row: null }),
  });
  return ops;
}

/** The mutate frame of a queued mutation: key right after type, so a server can read it from a frame's head. */
export const frameOf = (it: LogItem) => ({
  type: "mutate",
  key: it.key,
  seq: it.seq,
  resource: it.resource,
  name: it.name,
  args: it.args ?? {},
  at: it.at,
  traceparent: it.traceparent, // (JSON leaves it out when undefined)
});
