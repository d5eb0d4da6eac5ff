// SPDX-License-Identifier: Apache-2.0
// bench/cfg_layout's Node part: lays out CFGs of real kernel functions (the agent's inspect JSON files
// named on the command line) exactly as the console does — the same model and layout modules — and
// prints, per function, blocks, CPU and wall time, ranks, dummy vertices and crossings; then the last
// line "cfg_layout: N functions, largest B blocks, max T ms" with T the largest CPU time (the layout is
// single-threaded, so on an idle machine CPU and wall time agree; on a shared one wall time also counts
// waiting for a core). Files are laid out largest first in one process, so the largest runs cold, as it
// does in the console's fresh worker.
import { readFileSync } from "node:fs";
import { agentFunctionToDetail, parseAgentJson } from "../src/features/functions/agentCfg";
import { buildCfgModel, layoutInput } from "../src/shared/cfg/cfgModel";
import { layeredLayout } from "../src/shared/cfg/cfgLayout";

const files = process.argv.slice(2);
const fns = files
  .map((f) => agentFunctionToDetail(parseAgentJson(readFileSync(f, "utf8"))))
  .sort((a, b) => b.blocks.length - a.blocks.length);
let max = 0;
let maxWall = 0;
for (const detail of fns) {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const model = buildCfgModel(detail, null);
  const input = layoutInput(model);
  const r = layeredLayout(input.nodes, input.edges, input.entry);
  const wall = performance.now() - t0;
  const c = process.cpuUsage(c0);
  const cpu = (c.user + c.system) / 1000;
  max = Math.max(max, cpu);
  maxWall = Math.max(maxWall, wall);
  console.log(
    `${detail.function.name.padEnd(44)} ${String(detail.blocks.length).padStart(5)} blocks ${cpu.toFixed(0).padStart(6)} ms CPU ` +
      `${wall.toFixed(0).padStart(6)} ms wall  ${r.ranks} ranks, ${r.dummies} dummies, ${r.crossings} crossings, ` +
      `${Math.round(r.width)}x${Math.round(r.height)} px`,
  );
}
console.log(
  `largest wall time ${Math.round(maxWall)} ms; load average now ${(await import("node:os"))
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(" ")}`,
);
const largest = fns.length ? fns[0].blocks.length : 0;
console.log(`cfg_layout: ${fns.length} functions, largest ${largest} blocks, max ${Math.round(max)} ms`);
