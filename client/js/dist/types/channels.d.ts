import { type Member } from "./protocol.js";
import type { Problem } from "./errors.js";
import { Subscribable } from "./subscribable.js";
/** A topic's state for a UI: its presence list (S: the type of each member's state) and the last refusal. */
export interface TopicSnapshot<S = unknown> {
    members: Member<S>[];
    error?: Problem;
}
/** A joined topic; M is its message type, P its presence state type. Bind a UI with subscribe/getSnapshot, like Scope. */
export declare class Topic<M = unknown, P = unknown> extends Subscribable<TopicSnapshot<P>> {
    readonly name: string;
    /** Calls fn with every message of the topic; returns its remover. */
    onMessage(fn: (data: M, from: string) => void): () => void;
    /** Sends data to every subscriber; false when offline (nothing is queued). */
    publish(data: M): boolean;
    /** Replaces this client's presence state: sent now, and on every rejoin. */
    setState(state: P): void;
    /** Unsubscribes and forgets the topic. */
    leave(): void;
}
