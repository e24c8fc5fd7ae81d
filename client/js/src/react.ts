// React hooks for tide's browser client: the package entry point
// "@tidesync/client/react", with React as a peer dependency. Not part of the
// module the middleware serves (dist/tide.js), which stays free of
// dependencies. Each hook binds a client store with useSyncExternalStore,
// so a component keeps working across errors, retry(), a principal change
// and clearLocalData(): the Scope object never changes, its snapshots do.
import { useCallback, useMemo, useRef, useState, useSyncExternalStore } from "react";
import type { Client, Conditions, MutateOptions, Mutation, Scope, ScopeSnapshot, Status, TideError } from "./index.js";

/** What useScope returns: the scope's snapshot, its retry, and the Scope. */
export interface ScopeView extends ScopeSnapshot {
  /** Subscribes the scope again from no cursor (after an error, once access is back): Scope.retry. */
  readonly retry: () => void;
  readonly scope: Scope;
}

/**
 * useScope syncs a scope and re-renders with every snapshot (once per
 * applied batch). The returned object is the same until the snapshot
 * changes. The scope stays followed after the component unmounts (other
 * components share it); client.forget(scope) ends it.
 */
export function useScope(client: Client, resource: string | string[], conditions?: Conditions): ScopeView {
  const key = JSON.stringify([resource, conditions ?? null]);
  // eslint-disable-next-line react-hooks/exhaustive-deps -- the scope is the same for the same key
  const scope = useMemo(() => client.scope(resource, conditions), [client, key]);
  const snap = useSyncExternalStore(scope.subscribe, scope.getSnapshot, scope.getSnapshot);
  return useMemo(() => ({ ...snap, retry: scope.retry, scope }), [snap, scope]);
}

/** useStatus re-renders with the client's connection status (state, pending, code, message). */
export function useStatus(client: Client): Status {
  return useSyncExternalStore(client.status.subscribe, client.status.getSnapshot, client.status.getSnapshot);
}

/** What useMutation returns. */
export interface MutationView<A> {
  /** Runs the mutator with args (options made by the hook's options function, if any). */
  readonly mutate: (args: A) => Mutation;
  /** The last refusal of a mutation made here (RejectError, ConflictError): show error.message to a person. */
  readonly error: TideError | null;
  /** Forgets error. */
  readonly reset: () => void;
}

/**
 * useMutation binds one mutator: mutate(args) runs it (optimistically, with
 * the options options(args) returns, e.g. {local}), and error holds the last
 * refusal, for the component to show. mutate and reset are stable.
 */
export function useMutation<A>(client: Client, resource: string, name: string, options?: (args: A) => MutateOptions): MutationView<A> {
  const [error, setError] = useState<TideError | null>(null);
  const opts = useRef(options);
  opts.current = options;
  const mutate = useCallback(
    (args: A) => {
      const m = client.mutate(resource, name, args, opts.current?.(args));
      m.result.catch((e: TideError) => setError(e));
      return m;
    },
    [client, resource, name],
  );
  const reset = useCallback(() => setError(null), []);
  return useMemo(() => ({ mutate, error, reset }), [mutate, error, reset]);
}
