// tide's browser client: the wire protocol of docs/protocol.md with the
// guarantees of the Go client (client/doc.go). Zero runtime dependencies;
// built from these modules into one ES module (dist/tide.js) that tide's
// middleware serves at <prefix>/client.js. This file is the public API.
export { createClient, Client, type Options, type Status, type ClientEvent } from "./client.js";
export { Scope, type ScopeSnapshot, type ScopeState } from "./scope.js";
export { Topic, type TopicSnapshot } from "./channels.js";
export type { Subscribable } from "./subscribable.js";
export type { LocalTx, MutateOptions, Mutation, Result } from "./queue.js";
export type { Strategy, LogItem, Op } from "./replica.js";
export { memoryStore, indexedDBStore, type Store, type ScopeRecord } from "./storage.js";
export { ProtocolError, key, type Row, type Decimal, type Timestamp, type Base64, type PgArray, type Condition, type Conditions, type Entry, type Member, type ServerFrame, type TopicFrame } from "./protocol.js";
export type { TideSchema, Scalar, ResourceName, RowOf, ScopeColumns, ConditionsOf, MutatorName, ArgsOf, MutateRest, TopicName, ChannelOf, MessageOf, PresenceOf } from "./schema.js";
export { TideError, RejectError, ConflictError, type Problem } from "./errors.js";
