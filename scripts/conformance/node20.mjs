// Lets @modelcontextprotocol/conformance run on Node 20: its bundle imports `globSync` from "fs", which Node added
// in 22 (only its `tier-check` command calls it). Load with `node --import ./scripts/conformance/node20.mjs` or
// `NODE_OPTIONS=--import=./scripts/conformance/node20.mjs`; on Node >= 22 it does nothing.
import { register } from "node:module";

const FS = `data:text/javascript,${encodeURIComponent(`
export * from "node:fs";
export { default } from "node:fs";
export function globSync() { throw new Error("fs.globSync needs Node >= 22"); }
`)}`;

const HOOKS = `data:text/javascript,${encodeURIComponent(`
export async function resolve(specifier, context, next) {
  if ((specifier === "fs" || specifier === "node:fs")
      && (context.parentURL || "").includes("/@modelcontextprotocol/conformance/")) {
    return { url: ${JSON.stringify(FS)}, shortCircuit: true };
  }
  return next(specifier, context);
}
`)}`;

if (Number(process.versions.node.split(".")[0]) < 22) {
  register(HOOKS);
}
