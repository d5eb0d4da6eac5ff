// SPDX-License-Identifier: Apache-2.0
// bench/console_tree's Node part: the console's code tree (the same treeModel module) on this host's
// whole kernel catalog, as the agent parsed it (`hotpathd parse kernel --json --functions`, the file
// named first on the command line): the time to index it, to flatten it sorted by name for the
// virtualized list, and to flatten it for a search (every keystroke re-flattens). Medians of ITERATIONS
// runs (second argument, default 20). Then, labelled synthetic, the same on a generated catalog of twice
// the real size (an extra size, not this kernel). Last line:
//   console_tree: this kernel's catalog N functions: index X ms, flatten Y ms, search Z ms
import { readFileSync } from "node:fs";
import type { FunctionSummary } from "../src/api/types";
import { flattenTree, indexCatalog, type FlattenOptions } from "../src/features/tree/treeModel";

interface ParsedFunction {
  name: string;
  address: string;
  size: number;
  blocks: number;
  undecodable: boolean;
}
interface ParsedModule {
  name: string;
  function_list?: ParsedFunction[];
}

const [file, iterArg] = process.argv.slice(2);
if (!file) throw new Error("usage: treeModel.run.ts PARSE_JSON [ITERATIONS]");
const iterations = Number(iterArg ?? "20");
if (!Number.isInteger(iterations) || iterations < 1)
  throw new Error(`ITERATIONS must be a positive integer, not ${iterArg}`);

// Addresses are 64-bit integers: read them as strings, exactly.
const parsed = JSON.parse(readFileSync(file, "utf8").replace(/("address"\s*:\s*)(\d+)/g, '$1"$2"')) as {
  modules: ParsedModule[];
};
let id = 0;
const real: FunctionSummary[] = [];
for (const m of parsed.modules) {
  if (!m.function_list) throw new Error(`module ${m.name} has no function_list: was the file made with --functions?`);
  m.function_list.forEach((f, index) => {
    const addr = BigInt(f.address);
    real.push({
      id: ++id,
      name: f.name,
      module: m.name,
      digest: "0".repeat(64),
      index,
      address: Number(addr),
      address_hex: addr.toString(16),
      size: f.size,
      block_count: f.blocks,
      samples_per_sec: 0,
      undecodable: f.undecodable,
    });
  });
}
if (!real.length) throw new Error(`${file} lists no functions`);

const base: FlattenOptions = {
  query: "",
  sort: "name",
  hotness: null,
  collapsedModules: new Set(),
  expandedFunctions: new Set(),
  blocks: new Map(),
};

function median(f: () => void): number {
  const times: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const t0 = performance.now();
    f();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)];
}

function measure(label: string, catalog: FunctionSummary[], query: string) {
  const index = indexCatalog(catalog);
  const rows = flattenTree(index, base).length;
  const hits = flattenTree(index, { ...base, query }).length;
  const t = {
    index: median(() => {
      indexCatalog(catalog);
    }),
    flatten: median(() => {
      flattenTree(index, base);
    }),
    search: median(() => {
      flattenTree(index, { ...base, query });
    }),
  };
  console.log(
    `${label}: ${catalog.length} functions in ${index.modules.length} module(s), ${rows} rows: index ${t.index.toFixed(1)} ms, ` +
      `flatten sorted by name ${t.flatten.toFixed(1)} ms, search '${query}' (${hits} rows) ${t.search.toFixed(1)} ms ` +
      `(medians of ${iterations})`,
  );
  return t;
}

// A search a user would type on a real kernel: the first four letters of a common name prefix.
const mine = measure("this kernel's catalog", real, "tcp_");
const synthetic = Array.from({ length: 2 * real.length }, (_, i): FunctionSummary => ({
  id: i + 1,
  name: `fn_${(i * 7919) % (2 * real.length)}`,
  module: "vmlinux",
  digest: "0".repeat(64),
  index: i,
  address: 0,
  address_hex: (0xffffffff81000000n + BigInt(i * 64)).toString(16),
  size: 64,
  block_count: 3,
  samples_per_sec: 0,
  undecodable: false,
}));
measure("synthetic catalog, twice this kernel's size (an extra size, not a real kernel)", synthetic, "fn_1199");
const within = Math.max(mine.flatten, mine.search) < 50 ? "within" : "over";
console.log(`target: a keystroke re-flattens in under ~50 ms on this kernel's catalog: ${within} it`);
console.log(
  `console_tree: this kernel's catalog ${real.length} functions: index ${mine.index.toFixed(1)} ms, ` +
    `flatten ${mine.flatten.toFixed(1)} ms, search ${mine.search.toFixed(1)} ms`,
);
