/** The server refused a mutation (reject frame). */
export declare class RejectError extends Error {
    readonly key: string;
    readonly code: string;
    name: string;
    constructor(key: string, code: string, message: string);
}
/** The mutation's strategy reported a conflict on a row; the server's row landed. */
export declare class ConflictError extends Error {
    readonly key: string;
    readonly resource: string;
    readonly rowKey: string;
    readonly cause: unknown;
    name: string;
    constructor(key: string, resource: string, rowKey: string, cause: unknown);
}
