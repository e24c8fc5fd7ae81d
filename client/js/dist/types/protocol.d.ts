/** A row: a JSON object keyed by column name; each value in its wire form (docs/protocol.md, "Column values"). */
export type Row = {
    [column: string]: unknown;
};
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
export type Condition = string | number | boolean | {
    in: Array<string | number | boolean>;
};
/** A scope's conditions, by column. */
export type Conditions = {
    [column: string]: Condition;
};
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
export type TopicFrame = {
    id?: undefined;
    topic: string;
} & ({
    type: "topic-subscribed";
    presence?: boolean;
} | {
    type: "message";
    data: unknown;
    from?: string;
} | {
    type: "presence";
    members: Member[];
} | {
    type: "presence-diff";
    joins: Member[];
    leaves: Member[];
});
/** A decoded server frame (docs/protocol.md, "Server frames"). */
export type ServerFrame = {
    type: "welcome";
    build: string;
    principal: string;
    heartbeat_ms: number;
    limits: {
        [k: string]: number;
    };
} | {
    type: "ping";
} | {
    type: "changes";
    id?: string;
    cursor: string;
    entries: Entry[];
    more?: boolean;
} | {
    type: "caught-up";
    id: string;
    cursor: string;
} | {
    type: "reset";
    id?: string;
    reason: string;
} | {
    type: "error";
    id?: string;
    topic?: string;
    code: string;
    message: string;
    detail?: string;
} | {
    type: "update-available";
    build: string;
} | {
    type: "refresh-token";
    expires_in: number;
} | {
    type: "ack";
    key: string;
    cursor: string;
    entries: Entry[];
    replayed?: boolean;
} | {
    type: "reject";
    key: string;
    code: string;
    message: string;
    detail?: string;
} | TopicFrame;
/** A protocol violation by the server, or a frame this client cannot use. */
export declare class ProtocolError extends Error {
    name: string;
}
type Obj = {
    [k: string]: unknown;
};
/**
 * A row's key from its primary key's parts, in the resource's declared order: the text the server
 * sends and a scope's rows are keyed by (docs/protocol.md, "Row keys"). One part is its text:
 * key("t1") is "t1", key(42) is "42"; several are the JSON array of their texts: key("u1", "b7")
 * is '["u1","b7"]'. Pass integers beyond 2^53 as bigint or string.
 */
export declare const key: (...parts: Array<string | number | bigint | boolean>) => string;
export declare const isObj: (x: unknown) => x is Obj;
/** The code, message and detail of a decoded error or reject frame, as an app is shown them. */
export declare const problemOf: (f: {
    code: string;
    message: string;
    detail?: string;
}) => {
    detail?: string | undefined;
    code: string;
    message: string;
};
/**
 * decodeServerFrame parses one server frame (a WebSocket text message or a
 * polling response body) and checks the fields this client relies on.
 * Unknown fields are ignored; anything else malformed throws ProtocolError.
 */
export declare function decodeServerFrame(text: string): ServerFrame;
export {};
