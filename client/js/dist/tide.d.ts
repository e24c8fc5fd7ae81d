// The types of dist/tide.js (@tidesync/client): see types/index.d.ts.
export * from "./types/index.js";
