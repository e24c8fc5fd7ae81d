// The errors the client hands the app.

/** The server refused a mutation (reject frame). */
export class RejectError extends Error {
  override name = "RejectError";
  constructor(
    readonly key: string,
    readonly code: string,
    message: string,
  ) {
    super(`tide: mutation ${key} rejected: ${code}${message ? ": " + message : ""}`);
  }
}

/** The mutation's strategy reported a conflict on a row; the server's row landed. */
export class ConflictError extends Error {
  override name = "ConflictError";
  constructor(
    readonly key: string,
    readonly resource: string,
    readonly rowKey: string,
    readonly cause: unknown,
  ) {
    super(`tide: mutation ${key}: conflict on ${resource} ${JSON.stringify(rowKey)}: ${String(cause)}`);
  }
}
