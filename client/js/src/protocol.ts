// The wire protocol of docs/protocol.md: server frames and their decoding.

/** A row: a JSON object keyed by column name; each value in its wire form (docs/protocol.md, "Column values"). */
export type Row = { [column: string]: unknown };
/**
 * A numeric column's value (Go protocol.Decimal): its exact canonical text,
 * as Postgres prints it ("12.30", "-0.5", "NaN", "-Infinity"). Never a JS
 * number, so it is never rounded; convert with a decimal library if needed.
 */
export type Decimal = string;
/** A timestamptz, timestamp or date value: RFC 3339 in UTC with microseconds, "2026-12-02T14:30:00.123456Z". */
export type Timestamp = string;
/** A bytea value: standard base64. */
export type Base64 = string;
/**
 * A one-dimensional array column's value: a JSON array of its element's wire
 * form, null for a NULL element (the column itself is null when NULL).
 */
export type PgArray<T> = Array<T | null>;
/** A scope condition: a scalar (equality) or {in: [scalars]}. */
export type Condition = string | number | boolean | { in: Array<string | number | boolean> };
/** A scope's conditions, by column. */
export type Conditions = { [column: string]: Condition };

/** One change entry, as in a changes or ack frame. */
export interface Entry {
  op: "upsert" | "delete";
  key: string;
  row?: Row;
  origin?: string;
  resource?: string;
}

/** One subscriber of a presence topic: a connection of a principal; P is the channel's presence state type (absent: no state). */
export interface Member<P = unknown> {
  id: string;
  principal: string;
  state?: P;
}

/** A decoded channel frame (id is never set: frames name their topic). */
export type TopicFrame = { id?: undefined; topic: string } & (
  | { type: "topic-subscribed"; presence?: boolean }
  | { type: "message"; data: unknown; from?: string }
  | { type: "presence"; members: Member[] }
  | { type: "presence-diff"; joins: Member[]; leaves: Member[] }
);

/** A decoded server frame (docs/protocol.md, "Server frames"). */
export type ServerFrame =
  | { type: "welcome"; build: string; principal: string; heartbeat_ms: number; limits: { [k: string]: number } }
  | { type: "ping" }
  | { type: "changes"; id?: string; cursor: string; entries: Entry[]; more?: boolean }
  | { type: "caught-up"; id: string; cursor: string }
  | { type: "reset"; id?: string; reason: string }
  | { type: "error"; id?: string; topic?: string; code: string; message: string; detail?: string }
  | { type: "update-available"; build: string }
  | { type: "refresh-token"; expires_in: number }
  | { type: "ack"; key: string; cursor: string; entries: Entry[]; replayed?: boolean }
  | { type: "reject"; key: string; code: string; message: string; detail?: string }
  | TopicFrame;

/** A protocol violation by the server, or a frame this client cannot use. */
export class ProtocolError extends Error {
  override name = "ProtocolError";
}

type Obj = { [k: string]: unknown };
/**
 * A row's key from its primary key's parts, in the resource's declared order: the text the server
 * sends and a scope's rows are keyed by (docs/protocol.md, "Row keys"). One part is its text:
 * key("t1") is "t1", key(42) is "42"; several are the JSON array of their texts: key("u1", "b7")
 * is '["u1","b7"]'. Pass integers beyond 2^53 as bigint or string.
 */
export const key = (...parts: Array<string | number | bigint | boolean>): string =>
  parts.length > 1 ? JSON.stringify(parts.map(String)) : "" + parts;

export const isObj = (x: unknown): x is Obj => typeof x === "object" && x !== null && !Array.isArray(x);

const str = (f: Obj, k: string, opt = false): string => {
  const v = f[k];
  if (v === undefined && opt) return "";
  if (typeof v !== "string") throw new ProtocolError(`${String(f.type)}: bad ${k}`);
  return v;
};

function decodeEntries(f: Obj): Entry[] {
  const list = f.entries ?? [];
  if (!Array.isArray(list)) throw new ProtocolError(`${String(f.type)}: bad entries`);
  return list.map((e): Entry => {
    if (!isObj(e)) throw new ProtocolError("bad entry");
    const op = e.op;
    const key = str(e, "key");
    const out: Entry = { op: op as Entry["op"], key };
    if (op === "upsert") {
      if (!isObj(e.row)) throw new ProtocolError(`bad row ${key}`);
      out.row = e.row;
    } else if (op !== "delete") throw new ProtocolError(`bad op ${key}`);
    if (e.origin !== undefined) out.origin = str(e, "origin");
    if (e.resource !== undefined) out.resource = str(e, "resource");
    return out;
  });
}

/** The code, message and detail of a decoded error or reject frame, as an app is shown them. */
export const problemOf = (f: { code: string; message: string; detail?: string }) => ({ code: f.code, message: f.message, ...(f.detail ? { detail: f.detail } : {}) });

/** An error's or a reject's code, presentable message and, when present, detail for developers. */
const problem = (f: Obj) => ({ code: str(f, "code"), message: str(f, "message", true), ...(f.detail !== undefined ? { detail: str(f, "detail") } : {}) });

function decodeMembers(f: Obj, k: string): Member[] {
  const list = f[k] ?? [];
  if (!Array.isArray(list)) throw new ProtocolError(`${String(f.type)}: bad ${k}`);
  return list.map((m): Member => {
    if (!isObj(m)) throw new ProtocolError("bad member");
    return { id: str(m, "id"), principal: str(m, "principal", true), state: m.state };
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
    throw new ProtocolError("not JSON");
  }
  if (!isObj(f)) throw new ProtocolError("not a JSON object");
  if (f.v !== 1) throw new ProtocolError(`bad version ${f.v}`);
  const type = f.type;
  const id = () => (f.id !== undefined ? { id: str(f, "id") } : {});
  switch (type) {
    case "welcome": {
      const hb = f.heartbeat_ms;
      return { type, build: str(f, "build", true), principal: str(f, "principal", true), heartbeat_ms: typeof hb === "number" && hb > 0 ? hb : 0, limits: isObj(f.limits) ? (f.limits as { [k: string]: number }) : {} };
    }
    case "ping":
      return { type };
    case "changes":
      return { type, ...id(), cursor: str(f, "cursor"), entries: decodeEntries(f), ...(f.more === true ? { more: true } : {}) };
    case "caught-up":
      return { type, id: str(f, "id"), cursor: str(f, "cursor") };
    case "reset":
      return { type, ...id(), reason: str(f, "reason", true) };
    case "error":
      return { type, ...id(), ...(f.topic !== undefined ? { topic: str(f, "topic") } : {}), ...problem(f) };
    case "update-available":
      return { type, build: str(f, "build", true) };
    case "refresh-token":
      if (typeof f.expires_in !== "number") throw new ProtocolError("refresh-token: bad expires_in");
      return { type, expires_in: f.expires_in };
    case "ack":
      return { type, key: str(f, "key"), cursor: str(f, "cursor", true), entries: decodeEntries(f), ...(f.replayed === true ? { replayed: true } : {}) };
    case "reject":
      return { type, key: str(f, "key"), ...problem(f) };
    // App channels (docs/channels.md).
    case "message":
      if (f.data === undefined) throw new ProtocolError(`message: no "data"`);
      return { type, topic: str(f, "topic"), data: f.data, from: str(f, "from", true) };
    case "presence":
      return { type, topic: str(f, "topic"), members: decodeMembers(f, "members") };
    case "presence-diff":
      return { type, topic: str(f, "topic"), joins: decodeMembers(f, "joins"), leaves: decodeMembers(f, "leaves") };
    case "topic-subscribed":
      return { type, topic: str(f, "topic"), presence: f.presence === true };
  }
  throw new ProtocolError(`unknown frame type ${type}`);
}
