// Compile-time tests of the generic client API (docs/types.md): npm test
// type-checks this file; it is never run. schema.gen.ts is the TypeScript
// of core's test engine (core/typescript_test.go), which also checks that
// renaming a declaration on the Go side makes this file fail to compile.
import type { Schema } from "tide-test-schema";
import { createClient, type Client, type RowOf, type Scope, type Topic } from "../src/index.js";
import { useMutation, useScope } from "../src/react.js";

type Card = RowOf<Schema, "cards">;

export async function typed(tide: Client<Schema>) {
  // Scopes: resource names, scope columns and their types, row fields.
  const cards = tide.scope("cards", { board_id: "b1", lane: { in: [1, 2] } });
  const snap = cards.getSnapshot();
  const titles: string[] = snap.rows.map((c) => c.title);
  const first: Card | undefined = snap.rows[0];
  const note: string | null | undefined = first?.note;
  const id: number | undefined = snap.byKey.get("1")?.id;
  tide.scope(["cards", "boards"]);
  await tide.forget(cards);
  // @ts-expect-error an unknown resource
  tide.scope("cardz", { board_id: "b1" });
  // @ts-expect-error title is not a scope column
  tide.scope("cards", { title: "x" });
  // @ts-expect-error lane is a number
  tide.scope("cards", { lane: "1" });
  // @ts-expect-error no such column
  snap.rows.map((c) => c.heading);

  // Mutators: names, arguments (required unless they may be empty).
  tide.mutate("cards", "add", { board_id: "b1", title: "t", tags: [], nested: { N: [] } });
  tide.mutate("cards", "clear");
  tide.mutate("cards", "move", { id: 1, lane: 2 }, { key: "k1" });
  // @ts-expect-error no such mutator
  tide.mutate("cards", "remove", {});
  // @ts-expect-error a missing argument
  tide.mutate("cards", "move", { id: 1 });
  // @ts-expect-error an unknown argument
  tide.mutate("cards", "move", { id: 1, lane: 2, extra: 1 });
  // @ts-expect-error an argument of the wrong type
  tide.mutate("cards", "move", { id: "1", lane: 2 });
  // @ts-expect-error the arguments are required
  tide.mutate("cards", "move");

  // Topics: names from the channel patterns, messages, presence.
  const board = tide.topic("board:b1", { state: { name: "ann", typing: false } });
  board.publish({ x: 1, y: 2 });
  board.onMessage((m) => m.label?.toUpperCase());
  tide.topic(`chat:b1:${titles[0]}`).publish({ text: "hi" });
  tide.topic("lobby").publish(["any", "json"]);
  // @ts-expect-error not a topic of a channel
  tide.topic("boards:b1");
  // @ts-expect-error a message of the wrong shape
  board.publish({ x: 1 });
  // @ts-expect-error chat has no presence
  tide.topic("chat:b1:r", { state: 1 });
  // Presence: the channel's state type, set and read.
  board.setState({ name: "ann", color: "red", typing: true });
  const names: string[] = board.getSnapshot().members.map((m) => m.state?.name ?? m.principal);
  board.subscribe(() => board.getSnapshot().members.filter((m) => m.state?.typing));
  // @ts-expect-error a state field the channel does not declare
  board.setState({ name: "ann", typing: false, colour: "red" });
  // @ts-expect-error a state field of the wrong type
  tide.topic("board:b2", { state: { name: 1, typing: false } });
  // @ts-expect-error no such field in a member's state
  board.getSnapshot().members[0]?.state?.nickname;
  return [id, note, names];
}

export function untyped(tide: Client) {
  // Without a schema: any name, column, argument or topic, as before.
  const s: Scope = tide.scope("anything", { any_column: "x", n: { in: [1] } });
  const v: unknown = s.getSnapshot().rows[0]?.whatever;
  tide.mutate("r", "m", { free: 1 });
  tide.mutate("r", "m");
  const t: Topic = tide.topic("x:y", { state: 1 });
  t.publish(1);
  // A client of a schema is a client.
  const plain: Client = createClient<Schema>({});
  return [v, plain];
}

export function hooks(tide: Client<Schema>, plain: Client) {
  const v = useScope(tide, "cards", { board_id: "b1" });
  const title: string | undefined = v.rows[0]?.title;
  // @ts-expect-error title is not a scope column
  useScope(tide, "cards", { title: "x" });
  const m = useMutation(tide, "cards", "move");
  m.mutate({ id: 1, lane: 1 });
  // @ts-expect-error a missing argument
  m.mutate({ id: 1 });
  // @ts-expect-error no such mutator
  useMutation(tide, "cards", "nope");
  useMutation<{ a: number }>(plain, "r", "m").mutate({ a: 1 });
  useMutation<{ a: number }>(tide, "cards", "move").mutate({ a: 1 });
  const any: unknown = useScope(plain, "r", { c: 1 }).rows[0]?.anything;
  return [title, any];
}
