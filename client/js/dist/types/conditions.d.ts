import { type Conditions, type Row } from "./protocol.js";
/** The canonical JSON of a scope's conditions ("" for none), as the Go client builds it. */
export declare function canonicalConditions(c: Conditions | undefined): string;
/** matchesScope reports whether a row satisfies the scope's conditions. */
export declare function matchesScope(conds: Conditions | undefined, row: Row): boolean;
