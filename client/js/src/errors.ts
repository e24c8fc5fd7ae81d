// The errors the client hands the app. Each has a stable code, a short
// message a person may be shown (the server's own words: a mutator's
// validation message, never Go types) and a detail for developers.

/** What went wrong, as a scope's or a topic's error: code (stable), message (presentable), detail (for developers, not stable). */
export interface Problem {
  readonly code: string;
  readonly message: string;
  readonly detail?: string;
}

/** An error with a code: the server's (an error frame), or the client's own. message is presentable. */
export class TideError extends Error implements Problem {
  override name = "TideError";
  constructor(
    readonly code: string,
    message: string,
    readonly detail = "",
  ) {
    super(message || code);
  }
}

/**
 * A mutation was refused: by the server (a reject frame), or by the client
 * before it was queued (frame_too_large, invalid_args), or settled without
 * an answer (undeliverable, principal_changed, cleared).
 */
export class RejectError extends TideError {
  override name = "RejectError";
  constructor(
    readonly key: string,
    code: string,
    message: string,
    detail?: string,
  ) {
    super(code, message, detail);
  }
}

/** The mutation's strategy reported a conflict on a row (code "conflict"); the server's row landed. */
export class ConflictError extends TideError {
  override name = "ConflictError";
  constructor(
    readonly key: string,
    readonly resource: string,
    readonly rowKey: string,
    readonly cause: unknown,
  ) {
    super("conflict", cause instanceof Error ? cause.message : String(cause), `mutation ${key}: conflict on ${resource} ${JSON.stringify(rowKey)}`);
  }
}
