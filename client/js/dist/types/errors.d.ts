/** What went wrong, as a scope's or a topic's error: code (stable), message (presentable), detail (for developers, not stable). */
export interface Problem {
    readonly code: string;
    readonly message: string;
    readonly detail?: string;
}
/** An error with a code: the server's (an error frame), or the client's own. message is presentable. */
export declare class TideError extends Error implements Problem {
    readonly code: string;
    readonly detail: string;
    name: string;
    constructor(code: string, message: string, detail?: string);
}
/**
 * A mutation was refused: by the server (a reject frame), or by the client
 * before it was queued (frame_too_large, invalid_args), or settled without
 * an answer (undeliverable, principal_changed, cleared).
 */
export declare class RejectError extends TideError {
    readonly key: string;
    name: string;
    constructor(key: string, code: string, message: string, detail?: string);
}
/** The mutation's strategy reported a conflict on a row (code "conflict"); the server's row landed. */
export declare class ConflictError extends TideError {
    readonly key: string;
    readonly resource: string;
    readonly rowKey: string;
    readonly cause: unknown;
    name: string;
    constructor(key: string, resource: string, rowKey: string, cause: unknown);
}
