// The types of an app's declarations: the Schema type tide's generator
// writes from the Go server (core.Engine.TypeScript, docs/types.md), and
// what the client's generic methods derive from it. Types only: nothing
// here reaches the bundle.
import type { Row } from "./protocol.js";
import type { MutateOptions } from "./queue.js";

/** A value a scope condition compares: a key or scope column's value. */
export type Scalar = string | number | boolean;

/**
 * The shape of a generated schema, and the schema of a client created
 * without one: any resource, column, mutator or topic.
 */
export type TideSchema = {
  resources: {
    [resource: string]: {
      row: Row;
      key: readonly string[];
      scope: { [column: string]: Scalar };
      mutators: { [name: string]: unknown };
    };
  };
  channels: {
    [pattern: string]: { topic: string; message: unknown; presence: unknown };
  };
};

/** The resource names of a schema. */
export type ResourceName<S extends TideSchema> = keyof S["resources"] & string;

/** The row type of a resource (of any of several). */
export type RowOf<S extends TideSchema, R extends ResourceName<S>> = S["resources"][R]["row"];

/** The scope columns of a resource, with their types (for several resources: the columns all of them have). */
export type ScopeColumns<S extends TideSchema, R extends ResourceName<S>> = S["resources"][R]["scope"];

/** A scope's conditions: each a scope column's value, or {in: values}. */
export type ConditionsOf<S extends TideSchema, R extends ResourceName<S>> = {
  [C in keyof ScopeColumns<S, R>]?: ScopeColumns<S, R>[C] | { in: Array<ScopeColumns<S, R>[C]> };
};

/** The mutator names of a resource. */
export type MutatorName<S extends TideSchema, R extends ResourceName<S>> = keyof S["resources"][R]["mutators"] & string;

/** The argument type of a mutator. */
export type ArgsOf<S extends TideSchema, R extends ResourceName<S>, M extends MutatorName<S, R>> = S["resources"][R]["mutators"][M];

/** The rest of a mutate call: the arguments (optional when they may be empty), then the options. */
export type MutateRest<A> = {} extends A ? [args?: A, options?: MutateOptions] : [args: A, options?: MutateOptions];

/** The topic names of a schema's channels. */
export type TopicName<S extends TideSchema> = S["channels"][keyof S["channels"]]["topic"];

/** The channel a topic name belongs to. */
export type ChannelOf<S extends TideSchema, N extends string> = {
  [P in keyof S["channels"]]: N extends S["channels"][P]["topic"] ? S["channels"][P] : never;
}[keyof S["channels"]];

/** The message type of a topic. */
export type MessageOf<S extends TideSchema, N extends string> = ChannelOf<S, N>["message"];

/** The presence state type of a topic (never: the channel has no presence). */
export type PresenceOf<S extends TideSchema, N extends string> = ChannelOf<S, N>["presence"];
