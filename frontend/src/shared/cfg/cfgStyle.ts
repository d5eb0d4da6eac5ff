// SPDX-License-Identifier: Apache-2.0
// How a CFG edge is drawn, by successor kind: the function page's graph and the plan page's member
// graphs draw edges alike.
import type { EdgeKind } from "./cfgModel";

export const EDGE_STYLE: Record<EdgeKind, { stroke: string; dash?: string; label: string }> = {
  fallthrough: { stroke: "#57606a", label: "fallthrough" },
  taken: { stroke: "#0969da", dash: "6 4", label: "taken branch" },
  tail_call: { stroke: "#8250df", label: "tail call" },
  return: { stroke: "#1a7f37", label: "return" },
  indirect: { stroke: "#cf222e", dash: "2 3", label: "indirect jump" },
  other: { stroke: "#8c959f", dash: "1 4", label: "other" },
};
