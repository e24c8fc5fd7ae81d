// Cursors (docs/protocol.md, "Cursors"), compared by the Go client's rules
// (client/cursor.go).

type ParsedCursor = { epoch: string; pos: bigint; snap: boolean; after: string };

function b64urlBytes(s: string): string | null {
  if (!/^[A-Za-z0-9_-]*$/.test(s) || s.length % 4 === 1) return null;
  try {
    return atob(s.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((s.length + 3) % 4));
  } catch {
    return null;
  }
}

function parseCursor(s: string): ParsedCursor | null {
  if (s.length > 1024) return null;
  const p = s.split(".");
  let snap = false;
  let after = "";
  if (p[0] === "1s" && p.length === 4) {
    const k = b64urlBytes(p[3]!);
    if (k === null) return null;
    snap = true;
    after = k;
  } else if (!(p[0] === "1" && p.length === 3)) return null;
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(p[1]!) || !/^(0|[1-9][0-9]*)$/.test(p[2]!)) return null;
  return { epoch: p[1]!, pos: BigInt(p[2]!), snap, after };
}

/**
 * newer reports whether cursor a is strictly ahead of cursor b (the stored
 * one): "" is no cursor; an unparsable cursor or another epoch means the
 * server's word wins; else positions compare, then a change cursor beats a
 * snapshot cursor at its position, and snapshot cursors compare by their
 * key, bytewise.
 */
export function newer(a: string, b: string): boolean {
  if (a === "" || a === b) return false;
  if (b === "") return true;
  const ca = parseCursor(a);
  const cb = parseCursor(b);
  if (!ca || !cb || ca.epoch !== cb.epoch) return true;
  if (ca.pos !== cb.pos) return ca.pos > cb.pos;
  if (ca.snap && cb.snap) return ca.after > cb.after; // latin1 strings of bytes: bytewise
  return cb.snap && !ca.snap;
}
