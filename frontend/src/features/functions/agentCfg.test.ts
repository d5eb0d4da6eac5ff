// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import { agentFunctionToDetail, parseAgentJson } from "./agentCfg";

describe("agent inspect JSON", () => {
  it("keeps 64-bit addresses exact and makes offsets relative to the function", () => {
    const text = `{"function": {"name": "f", "module": "vmlinux", "address": 18446744071586012017, "size": 32},
      "blocks": [{"start": 18446744071586012017, "size": 16, "instructions": [{}, {}], "successors": [
        {"kind": "taken", "target": 18446744071586012033, "target_name": "f+0x10"},
        {"kind": "tail_call", "target": 18446744071586001440, "target_name": "g"}]},
        {"start": 18446744071586012033, "size": 16, "instructions": [{}], "successors": [{"kind": "return"}]}]}`;
    const d = agentFunctionToDetail(parseAgentJson(text));
    expect(d.function.address_hex).toBe(18446744071586012017n.toString(16));
    expect(d.blocks.map((b) => [b.offset, b.instruction_count])).toEqual([
      [0, 2],
      [16, 1],
    ]);
    expect(d.blocks[0].successors[0]).toMatchObject({ kind: "taken", target_offset: 16 });
    expect(d.blocks[0].successors[1]).toMatchObject({ kind: "tail_call", target_offset: null, target_name: "g" });
  });
});
