// A tiny React page on the todo demo for the browser tests: a project's
// todos through @tidesync/client/react (useScope, useStatus, useMutation),
// bundled by the test with esbuild (React from node_modules) and served on
// the demo's origin. The buttons are the app's: retry, reconnect, logout.
import { createRoot } from "react-dom/client";
import { createClient } from "@tidesync/client";
import { useMutation, useScope, useStatus } from "@tidesync/client/react";

const params = new URLSearchParams(location.search);
window.principalChanges = [];
const tide = createClient({
  build: "react-e2e",
  dbName: "react-e2e",
  maxBackoff: 1000,
  onEvent: (e) => e.type === "principal-changed" && window.principalChanges.push([e.from, e.to]),
});
window.tide = tide;
window.renders = 0; // renders of Todos: a remount would start a new element
window.scopes = new Set(); // every Scope object the hook handed out

function Todos({ project }) {
  const { rows, state, error, retry, scope } = useScope(tide, "todos", { project_id: project });
  const status = useStatus(tide);
  const add = useMutation(tide, "todos", "put", (t) => ({ local: (tx) => tx.upsert("todos", t.id, t) }));
  window.renders++;
  window.scopes.add(scope);
  return (
    <div>
      <p id="status" data-state={status.state} data-pending={status.pending}>{status.state}</p>
      <p id="scope" data-state={state}>{state}{error ? `: ${error.code}: ${error.message}` : ""}</p>
      <ul id="rows">{[...rows].sort((a, b) => a.id.localeCompare(b.id)).map((t) => <li key={t.id}>{t.title}</li>)}</ul>
      {add.error && <p id="add-error" data-code={add.error.code}>{add.error.message}</p>}
      <button id="retry" onClick={retry}>retry</button>
      <button id="reconnect" onClick={() => tide.reconnect()}>reconnect</button>
      <button id="add" onClick={() => add.mutate({ id: "r" + Date.now(), project_id: project, title: params.get("title") ?? "from react", done: false })}>add</button>
    </div>
  );
}

createRoot(document.getElementById("root")).render(<Todos project={params.get("project") ?? "demo"} />);
