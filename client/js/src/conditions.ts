// Scope conditions: their canonical JSON (the scope's identity, as the Go
// client builds it) and row matching.
import { isObj, type Conditions, type Row } from "./protocol.js";

function scalarJSON(x: unknown): string {
  if (typeof x === "string" || typeof x === "boolean") return JSON.stringify(x);
  if (typeof x === "number" && Number.isInteger(x)) return String(x);
  throw new Error(`condition value ${JSON.stringify(x)}: a string, integer or boolean`);
}

/** The canonical JSON of a scope's conditions ("" for none), as the Go client builds it. */
export function canonicalConditions(c: Conditions | undefined): string {
  const cols = Object.keys(c ?? {}).sort();
  if (cols.length === 0) return "";
  const parts = cols.map((col) => {
    const v = c![col];
    let j: string;
    if (isObj(v)) {
      const list = v.in;
      if (!Array.isArray(list) || list.length === 0 || Object.keys(v).length !== 1) throw new Error(`condition ${col}: a scalar or {in: [scalars]}`);
      const vals = [...new Set(list.map(scalarJSON))].sort();
      j = vals.length === 1 ? vals[0]! : `{"in":[${vals.join(",")}]}`;
    } else j = scalarJSON(v);
    return JSON.stringify(col) + ":" + j;
  });
  return "{" + parts.join(",") + "}";
}

function scalarText(v: unknown): string {
  if (typeof v === "string") return /^-?[0-9]+$/.test(v) ? v : JSON.stringify(v);
  if (typeof v === "boolean" || (typeof v === "number" && Number.isInteger(v))) return String(v);
  return "";
}

/** matchesScope reports whether a row satisfies the scope's conditions. */
export function matchesScope(conds: Conditions | undefined, row: Row): boolean {
  for (const [col, cond] of Object.entries(conds ?? {})) {
    const got = scalarText(row[col]);
    if (got === "") return false;
    const list = isObj(cond) ? cond.in : [cond];
    if (!list.some((c) => scalarText(c) === got)) return false;
  }
  return true;
}
