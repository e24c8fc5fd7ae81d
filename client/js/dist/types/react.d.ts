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
export declare function useScope(client: Client, resource: string | string[], conditions?: Conditions): ScopeView;
/** useStatus re-renders with the client's connection status (state, pending, code, message). */
export declare function useStatus(client: Client): Status;
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
export declare function useMutation<A>(client: Client, resource: string, name: string, options?: (args: A) => MutateOptions): MutationView<A>;
