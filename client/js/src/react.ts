// React hooks for tide's browser client: the package entry point
// "@tidesync/client/react", with React as a peer dependency. Not part of the
// module the middleware serves (dist/tide.js), which stays free of
// dependencies. Each hook binds a client store with useSyncExternalStore,
// so a component keeps working across errors, retry(), a principal change
// and clearLocalData(): the Scope object never changes, its snapshots do.
import { useCallback, useMemo, useRef, useState, useSyncExternalStore } from "react";
import type { ArgsOf, Client, ConditionsOf, MutateOptions, Mutation, MutatorName, ResourceName, Row, RowOf, Scope, ScopeSnapshot, Status, TideError, TideSchema } from "./index.js";

/** What useScope returns: the scope's snapshot, its retry, and the Scope; R is the row type. */
export interface ScopeView<R extends Row = Row> extends ScopeSnapshot<R> {
  /** Subscribes the scope again from no cursor (after an error, once access is back): Scope.retry. */
  readonly retry: () => void;
  readonly scope: Scope<R>;
}

/**
 * useScope syncs a scope and re-renders with every snapshot (once per
 * applied batch). The returned object is the same until the snapshot
 * changes. The scope stays followed after the component unmounts (other
 * components share it); client.forget(scope) ends it.
 */
export function useScope<S extends TideSchema, R extends ResourceName<S>>(client: Client<S>, resource: R | R[], conditions?: ConditionsOf<S, R>): ScopeView<RowOf<S, R>> {
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

/** The arguments useMutation's mutate takes: A if given, else the mutator's arguments in the client's schema. */
export type HookArgs<A, S extends TideSchema, R extends ResourceName<S>, M extends MutatorName<S, R>> = [A] extends [never] ? ArgsOf<S, R, M> : A;

/**
 * useMutation binds one mutator: mutate(args) runs it (optimistically, with
 * the options options(args) returns, e.g. {local}), and error holds the last
 * refusal, for the component to show. mutate and reset are stable. With a
 * client of a schema (createClient<Schema>()) the resource, the mutator and
 * its arguments are checked against it; A, if given, is the arguments'
 * type instead.
 */
export function useMutation<A = never, S extends TideSchema = TideSchema, R extends ResourceName<S> = ResourceName<S>, M extends MutatorName<S, R> = MutatorName<S, R>>(
  client: Client<S>,
  resource: R,
  name: M,
  options?: (args: HookArgs<A, S, R, M>) => MutateOptions,
): MutationView<HookArgs<A, S, R, M>> {
  const [error, setError] = useState<TideError | null>(null);
  const opts = useRef(options);
  opts.current = options;
  const mutate = useCallback(
    (args: HookArgs<A, S, R, M>) => {
      const m = (client as Client).mutate(resource, name, args, opts.current?.(args));
      m.result.catch((e: TideError) => setError(e));
      return m;
    },
    [client, resource, name],
  );
  const reset = useCallback(() => setError(null), []);
  return useMemo(() => ({ mutate, error, reset }), [mutate, error, reset]);
}
