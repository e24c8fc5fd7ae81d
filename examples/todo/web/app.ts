// The todo demo's page logic in TypeScript, typed end to end: Schema is
// generated from the Go declarations (go generate ./examples/todo writes
// tide.gen.ts), so a renamed column, mutator or argument on the server
// fails this file's type check (npm test in client/js runs it).
import { createClient, type Client, type RowOf } from "@tidesync/client";
import type { Schema } from "./tide.gen.js";

/** A todo row, as the server's Todo struct declares it. */
export type Todo = RowOf<Schema, "todos">;

/** Connects to the demo's server (tide's middleware at /tide). */
export const connect = (): Client<Schema> => createClient<Schema>({ url: "/tide", build: "todo-demo" });

/** Shows project's todos in list, live, and who else views the project in viewers. */
export function show(tide: Client<Schema>, project: string, list: HTMLElement, viewers: HTMLElement): () => void {
  const scope = tide.scope("todos", { project_id: project });
  const stopRows = scope.subscribe((snap) => {
    list.replaceChildren(
      ...[...snap.rows]
        .sort((a, b) => a.id.localeCompare(b.id, undefined, { numeric: true }))
        .map((t) => {
          const li = document.createElement("li");
          li.textContent = t.title;
          li.className = t.done ? "done" : "";
          li.onclick = () => void put(tide, { ...t, done: !t.done });
          li.ondblclick = () => void remove(tide, t);
          return li;
        }),
    );
  });
  const topic = tide.topic(`project:${project}`);
  const stopViewers = topic.subscribe((s) => {
    viewers.textContent = [...new Set(s.members.map((m) => m.principal))].sort().join(", ");
  });
  return () => {
    stopRows();
    stopViewers();
    topic.leave();
    scope.close();
  };
}

/** Creates or changes a todo: at once on this page, then on the server (todos.put). */
export function put(tide: Client<Schema>, t: Todo) {
  return tide.mutate("todos", "put", { id: t.id, project_id: t.project_id, title: t.title, done: t.done }, {
    local: (tx) => tx.upsert("todos", t.id, { ...t, updated_at: new Date().toISOString() }),
  }).result;
}

/** Removes a todo (todos.remove). */
export function remove(tide: Client<Schema>, t: Todo) {
  return tide.mutate("todos", "remove", { id: t.id, project_id: t.project_id }, { local: (tx) => tx.delete("todos", t.id) }).result;
}
