// The HTTP polling transport (docs/protocol.md, "Polling"): where
// WebSockets are blocked, each scope polls POST <prefix>/changes and the
// queue is posted to POST <prefix>/mutate. Every response names the
// session's principal (Tide-Principal): nothing stored is shown, and no
// mutation sent, before it confirmed whose store this is.
import type { Client } from "./client.js";
import { FATAL_SUB_CODES, names, type Scope } from "./scope.js";
import { frameOf } from "./queue.js";
import { problemOf, type ServerFrame } from "./protocol.js";
import { TideError } from "./errors.js";

/** Asks the server whose session this is and binds the store to it; true if it was bound to that principal already. */
async function whoami(c: Client, principal?: string): Promise<boolean> {
  const p = principal ?? (await c.post_("/changes", { v: 1 })).principal;
  const same = c.me_ === p;
  if (!same) await (c.chain_ = c.chain_.then(() => c.bind_(p)));
  return same;
}

/** Starts polling every scope and posting the queue, once the store is bound to the session's principal. */
export function pollAll(c: Client) {
  whoami(c).then(
    () => {
      c.failedOpens_ = 0;
      for (const s of c.scopes_) pollScope(c, s);
      void postAll(c);
    },
    (e: Error) => {
      c.error_(e);
      c.retry_(false);
    },
  );
}

/** Polls one scope until it is closed: at once while the server has more, then every pollInterval. */
export function pollScope(c: Client, s: Scope) {
  if (!s.loaded_ || s.stopped_ || c.closed_ || c.me_ === undefined) return;
  clearTimeout(s.pollTimer_);
  const run = () => {
    const body: { [k: string]: unknown } = { v: 1, ...names(s), cursor: s.copy_!.cursor };
    if (s.conditions) body.conditions = s.conditions;
    if (!s.copy_!.cursor) s.resetNext_ = true;
    const next = (ms: number) => !c.closed_ && c.scopes_.has(s) && (s.pollTimer_ = setTimeout(run, ms));
    c.post_("/changes", body)
      .then(async ({ status, frame, principal }) => {
        // Another session answered: the store is bound to it first (emptied), and the scope polled again from no cursor.
        if (!(await whoami(c, principal))) return void next(0);
        let again = false;
        await (c.chain_ = c.chain_.then(async () => void (again = await apply(c, s, status, frame))));
        const more = again || frame.type === "reset" || (frame.type === "changes" && frame.more);
        if (frame.type !== "error" || again) next(more ? 0 : c.o_.pollInterval);
      })
      .catch((e: Error) => {
        c.error_(e);
        c.offline_();
        next(c.backoff_(c.attempt_++));
      });
  };
  run();
}

/** Applies one poll's answer; true if the scope is to be polled again at once (from no cursor). */
async function apply(c: Client, s: Scope, status: number, frame: ServerFrame): Promise<boolean> {
  if (frame.type === "error" && frame.code === "invalid_cursor") {
    // A cursor the server cannot resume from (sealed by another deployment, or from an older
    // server): the snapshot starts over, and replaces the copy when its first page arrives.
    s.copy_!.cursor = "";
    return true;
  }
  if (frame.type === "error") {
    if (FATAL_SUB_CODES.includes(frame.code) || status === 401 || status === 403 || status === 404) {
      await c.refuse_(s, problemOf(frame), true);
      c.updateStatus_();
      return false;
    }
    throw new TideError(frame.code, frame.message, frame.detail);
  }
  c.setStatus_({ state: c.status.s_.state === "error" ? "error" : "catching-up" });
  c.attempt_ = 0;
  await c.applyFrame_(s, frame);
  if (frame.type === "reset" || (frame.type === "changes" && frame.more)) return false;
  s.set_("live");
  c.settle_();
  c.updateStatus_();
  return false;
}

/** Posts the unanswered mutations in seq order, one at a time, after checking whose session it is; retried after pollInterval on a failure. */
export async function postAll(c: Client) {
  if (c.posting_ || c.closed_ || c.me_ === undefined || !c.replica_.log_.some((it) => !it.acked)) return;
  c.posting_ = true;
  try {
    if (!(await whoami(c))) return; // another session: the queue was the previous principal's, and is gone
    for (const it of [...c.replica_.log_].sort((a, b) => a.seq - b.seq)) {
      if (it.acked) continue;
      const { frame } = await c.post_("/mutate", frameOf(it));
      await (c.chain_ = c.chain_.then(() => (frame.type === "ack" || frame.type === "reject" ? c.handle_(frame, c.conn_) : undefined)));
    }
  } catch (e) {
    c.error_(e);
    clearTimeout(c.timer_);
    c.timer_ = setTimeout(() => void postAll(c), c.o_.pollInterval);
  } finally {
    c.posting_ = false;
  }
}
