// The HTTP polling transport (docs/protocol.md, "Polling"): where
// WebSockets are blocked, each scope polls POST <prefix>/changes and the
// queue is posted to POST <prefix>/mutate.
import type { Client } from "./client.js";
import { FATAL_SUB_CODES, names, type Scope } from "./scope.js";
import { frameOf } from "./queue.js";

/** Starts polling every scope and posting the queue. */
export function pollAll(c: Client) {
  c.failedOpens_ = 0;
  for (const s of c.scopes_) pollScope(c, s);
  void postAll(c);
}

/** Polls one scope until it is closed: at once while the server has more, then every pollInterval. */
export function pollScope(c: Client, s: Scope) {
  if (!s.copy_ || s.stopped_ || c.closed_) return;
  clearTimeout(s.pollTimer_);
  const run = () => {
    const body: { [k: string]: unknown } = { v: 1, ...names(s), cursor: s.copy_!.cursor };
    if (s.conditions) body.conditions = s.conditions;
    if (!s.copy_!.cursor) s.resetNext_ = true;
    c.post_("/changes", body)
      .then(
        ({ status, frame }) =>
          (c.chain_ = c.chain_.then(async () => {
            if (frame.type === "error") {
              if (FATAL_SUB_CODES.includes(frame.code) || status === 403 || status === 404) {
                s.stopped_ = true;
                s.set_("error", { code: frame.code, message: frame.message });
                return c.updateStatus_();
              }
              throw new Error(`tide: ${frame.code}: ${frame.message}`);
            }
            c.setStatus_({ state: c.status.s_.state === "error" ? "error" : "catching-up" });
            c.attempt_ = 0;
            await c.applyFrame_(s, frame);
            const more = frame.type === "reset" || (frame.type === "changes" && frame.more);
            if (!more) {
              s.set_("live");
              c.settle_();
              c.updateStatus_();
            }
            if (!c.closed_ && c.scopes_.has(s)) s.pollTimer_ = setTimeout(run, more ? 0 : c.o_.pollInterval);
          })),
      )
      .catch((e: Error) => {
        c.emit_({ type: "error", error: e });
        c.setStatus_({ state: "offline" });
        const cap = Math.min(c.o_.maxBackoff, c.o_.minBackoff * 2 ** c.attempt_++);
        if (!c.closed_) s.pollTimer_ = setTimeout(run, Math.random() * cap);
      });
  };
  run();
}

/** Posts the unanswered mutations in seq order, one at a time; retried after pollInterval on a failure. */
export async function postAll(c: Client) {
  if (c.posting_ || c.closed_) return;
  c.posting_ = true;
  try {
    for (const it of [...c.replica_.log_].sort((a, b) => a.seq - b.seq)) {
      if (it.acked) continue;
      const { frame } = await c.post_("/mutate", frameOf(it), { "Tide-Origin": c.origin_ });
      await (c.chain_ = c.chain_.then(() => (frame.type === "ack" || frame.type === "reject" ? c.handle_(frame) : undefined)));
    }
  } catch (e) {
    c.emit_({ type: "error", error: e as Error });
    clearTimeout(c.timer_);
    c.timer_ = setTimeout(() => void postAll(c), c.o_.pollInterval);
  } finally {
    c.posting_ = false;
  }
}
