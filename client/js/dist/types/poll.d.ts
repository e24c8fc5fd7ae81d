import type { Client } from "./client.js";
import { type Scope } from "./scope.js";
/** Starts polling every scope and posting the queue, once the store is bound to the session's principal. */
export declare function pollAll(c: Client): void;
/** Polls one scope until it is closed: at once while the server has more, then every pollInterval. */
export declare function pollScope(c: Client, s: Scope): void;
/** Posts the unanswered mutations in seq order, one at a time, after checking whose session it is; retried after pollInterval on a failure. */
export declare function postAll(c: Client): Promise<void>;
