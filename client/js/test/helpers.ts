// Shared by the unit tests: a fake WebSocket the tests drive, and a bounded
// wait on a condition (never a sleep as synchronization).
import { afterEach } from "node:test";
import { createClient, memoryStore, type Client, type ClientEvent, type Options, type Store } from "../src/index";

// Every client a test made is closed after it, passed or failed: a failed
// assertion must fail the run, not leave a client's timers holding it open.
const made: Client[] = [];
afterEach(() => {
  for (const c of made.splice(0)) c.close();
});

export type Sent = { [k: string]: any };

export class FakeWS {
  static all: FakeWS[] = [];
  static autoOpen = true;
  sent: Sent[] = [];
  readyState = 0;
  onopen: (() => void) | null = null;
  onmessage: ((ev: { data: string }) => void) | null = null;
  onclose: ((ev: { code: number; reason: string }) => void) | null = null;
  constructor(readonly url: string) {
    FakeWS.all.push(this);
    if (FakeWS.autoOpen) queueMicrotask(() => this.open());
  }
  open() {
    this.readyState = 1;
    this.onopen?.();
  }
  send(t: string) {
    this.sent.push(JSON.parse(t));
  }
  close(code = 1000, reason = "") {
    if (this.readyState === 3) return;
    this.readyState = 3;
    queueMicrotask(() => this.onclose?.({ code, reason }));
  }
  /** A server frame: an object (v:1 is added) or raw text. */
  push(f: Sent | string) {
    this.onmessage?.({ data: typeof f === "string" ? f : JSON.stringify({ v: 1, ...f }) });
  }
  of(type: string): Sent[] {
    return this.sent.filter((f) => f.type === type);
  }
}

/** Waits until fn returns a truthy value (polled on the event loop), at most ms. */
export async function until<T>(what: string, fn: () => T | undefined | null | false | Promise<T | undefined | null | false>, ms = 5000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await new Promise((r) => setImmediate(r));
  }
}

export const welcome = { type: "welcome", build: "web-1", limits: {} };

/** A client on FakeWS with a memory store (shared if given) and its events. */
export function client(extra: Options = {}): { cl: Client; events: ClientEvent[]; store: Store } {
  FakeWS.all = [];
  FakeWS.autoOpen = true;
  const events: ClientEvent[] = [];
  const store = (extra.store as Store | undefined) ?? memoryStore();
  const cl = createClient({ url: "http://app.test/tide", WebSocket: FakeWS as unknown as typeof WebSocket, build: "web-1", minBackoff: 1, maxBackoff: 5, onEvent: (e) => events.push(e), ...extra, store });
  made.push(cl);
  return { cl, events, store };
}

/** The nth socket, opened and welcomed (hello answered). */
export async function welcomed(n = 0, w: Sent = welcome): Promise<FakeWS> {
  const ws = await until("socket " + n, () => FakeWS.all[n]);
  await until("hello", () => ws.of("hello")[0]);
  ws.push(w);
  return ws;
}
