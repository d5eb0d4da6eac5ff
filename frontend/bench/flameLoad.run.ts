// SPDX-License-Identifier: Apache-2.0
// bench/flame's Node part: where the flame worker's time goes on the bench's hour, step by step, with
// the worker's own modules (flameStacks.ts, flameTree.ts, flameModel.ts) on the replies bench/flame.py
// saved: the first file is /flamegraph/stacks?definitions=true (a page whose browser keeps nothing),
// the second /flamegraph/stacks alone (a page whose browser kept the definitions). Steps, as FlameLoad
// runs them: parse (bytes decoded and JSON.parse), define (the definitions kept by stack id), paths (the
// view's stacks as the tree's paths), tree (merged into the tree), layout. Medians of ITERATIONS runs
// (third argument, default 5), each with a new cache, as a new page's worker. Last lines:
//   flame worker cold: parse P ms, define D ms, paths A ms, tree T ms, layout L ms (N nodes)
//   flame worker warm storage: parse P ms, paths A ms, tree T ms, layout L ms
import { readFileSync } from "node:fs";
import type { FlameDefinitionsData, FlameStacksData } from "../src/api/types";
import { layoutFlame } from "../src/features/flame/flameModel";
import { StackCache } from "../src/features/flame/flameStacks";
import { buildTree } from "../src/features/flame/flameTree";

const [withDefs, alone, n = "5"] = process.argv.slice(2);
const iterations = Number(n);
const bodies = [withDefs, alone].map((f) => new Uint8Array(readFileSync(f)).buffer);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

function steps(cold: ArrayBuffer, warm: ArrayBuffer) {
  const t: Record<string, number> = {};
  const step = <T>(name: string, f: () => T): T => {
    const t0 = performance.now();
    const r = f();
    t[name] = performance.now() - t0;
    return r;
  };
  const cache = new StackCache();
  const reply = step("parse", () => JSON.parse(new TextDecoder().decode(cold)) as FlameStacksData);
  step("define", () => cache.define("h", reply.definitions as FlameDefinitionsData));
  const { frames, paths } = step("paths", () => cache.paths("h", reply.stacks));
  const tree = step("tree", () => buildTree(paths));
  const layout = step("layout", () =>
    layoutFlame({ frames, frame: tree.frame, parent: tree.parent, total: tree.total, self: tree.self }),
  );
  // Warm storage: the definitions were kept (defined above); the reply carries the samples alone.
  const again = step("warm parse", () => JSON.parse(new TextDecoder().decode(warm)) as FlameStacksData);
  const p2 = step("warm paths", () => cache.paths("h", again.stacks));
  const t2 = step("warm tree", () => buildTree(p2.paths));
  step("warm layout", () =>
    layoutFlame({ frames: p2.frames, frame: t2.frame, parent: t2.parent, total: t2.total, self: t2.self }),
  );
  return { t, nodes: layout.frame.length };
}

const runs = Array.from({ length: iterations }, () => steps(bodies[0], bodies[1]));
const m = (k: string) => Math.round(median(runs.map((r) => r.t[k])));
console.log(
  `flame worker cold: parse ${m("parse")} ms, define ${m("define")} ms, paths ${m("paths")} ms, ` +
    `tree ${m("tree")} ms, layout ${m("layout")} ms (${runs[0].nodes} nodes, ${(bodies[0].byteLength / 1024).toFixed(0)} KiB)`,
);
console.log(
  `flame worker warm storage: parse ${m("warm parse")} ms, paths ${m("warm paths")} ms, ` +
    `tree ${m("warm tree")} ms, layout ${m("warm layout")} ms (${(bodies[1].byteLength / 1024).toFixed(0)} KiB)`,
);
