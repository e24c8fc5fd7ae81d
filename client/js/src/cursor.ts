// Cursors (docs/protocol.md, "Cursors"), compared by the Go client's rules
// (client/cursor.go).

type ParsedCursor = { epoch: string; pos: bigint; snap: boolean; seq: bigint };

const decimal = /^(0|[1-9][0-9]*)$/;

function parseCursor(s: string): ParsedCursor | null {
  if (s.length > 1024) return null;
  const p = s.split(".");
  let snap = false;
  let seq = 0n;
  if (p[0] === "2s" && p.length === 5) {
    // A snapshot cursor: its number, then where the snapshot stands, sealed by the server (opaque).
    if (!decimal.test(p[3]!) || p[3] === "0" || !/^[A-Za-z0-9_-]+$/.test(p[4]!)) return null;
    snap = true;
    seq = BigInt(p[3]!);
  } else if (!(p[0] === "1" && p.length === 3)) return null;
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(p[1]!) || !decimal.test(p[2]!)) return null;
  return { epoch: p[1]!, pos: BigInt(p[2]!), snap, seq };
}

/**
 * newer reports whether cursor a is strictly ahead of cursor b (the stored
 * one): "" is no cursor; an unparsable cursor or another epoch means the
 * server's word wins; else positions compare, then a change cursor beats a
 * snapshot cursor at its position, and snapshot cursors compare by their
 * number (the server numbers a snapshot's cursors in the order it hands
 * them out).
 */
export function newer(a: string, b: string): boolean {
  if (a === "" || a === b) return false;
  if (b === "") return true;
  const ca = parseCursor(a);
  const cb = parseCursor(b);
  if (!ca || !cb || ca.epoch !== cb.epoch) return true;
  if (ca.pos !== cb.pos) return ca.pos > cb.pos;
  if (ca.snap && cb.snap) return ca.seq > cb.seq;
  return cb.snap && !ca.snap;
}
