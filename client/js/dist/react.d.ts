// The types of dist/react.js (@tidesync/client/react): see types/react.d.ts.
export * from "./types/react.js";
