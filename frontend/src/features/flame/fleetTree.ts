// SPDX-License-Identifier: Apache-2.0
// A fleet group's flame graph or compare answer (a tree the server built) read off the main thread: the
// flame worker parses the answer's bytes, lays its tree out, and posts back the layout, its frames and the
// answer without its tree (what the page shows around the graph). Pure, so the worker and the inline
// fallback (jsdom) share it.
import type { FleetFlameDiff, FleetFlameGraph } from "../../api/types";
import type { FlameInput } from "./flameModel";

/** A group's answer without its tree. */
export type FleetTreeSummary = Omit<FleetFlameGraph, "frames" | "nodes"> | Omit<FleetFlameDiff, "frames" | "nodes">;

export function fleetInput(d: FleetFlameGraph | FleetFlameDiff): FlameInput {
  const n = d.nodes;
  if ("a_total" in n) {
    return {
      frames: d.frames,
      frame: n.frame,
      parent: n.parent,
      total: n.a_total,
      self: n.a_self,
      bTotal: n.b_total,
      bSelf: n.b_self,
    };
  }
  return { frames: d.frames, frame: n.frame, parent: n.parent, total: n.total, self: n.self };
}

/** The answer's bytes as the tree to lay out and the rest of the answer. */
export function readFleetTree(body: ArrayBuffer): { input: FlameInput; summary: FleetTreeSummary } {
  const reply = JSON.parse(new TextDecoder().decode(body)) as FleetFlameGraph | FleetFlameDiff;
  const input = fleetInput(reply);
  const { frames: _frames, nodes: _nodes, ...summary } = reply;
  return { input, summary };
}
