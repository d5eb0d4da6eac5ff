// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import { groupCallees } from "./calleesModel";

const call = (site: number, target: number, name: string | null, fid: number | null = 7) => ({
  site_offset: site,
  target_address: target,
  target_address_hex: target.toString(16),
  name,
  module: "vmlinux",
  function_id: fid,
});

describe("callees from code", () => {
  it("gives one row per called function with its call sites, most-called first", () => {
    const sites = Array.from({ length: 200 }, (_, i) => call(0x400 - i * 4, 0x1000, "__fentry_helper"));
    const groups = groupCallees([call(0x10, 0x2000, "kfree", 9), ...sites, call(0x20, 0x3000, null, null)]);
    expect(groups.map((g) => [g.name, g.sites.length])).toEqual([
      ["__fentry_helper", 200],
      ["kfree", 1],
      [null, 1],
    ]);
    expect(groups[0].sites[0]).toBe(0x400 - 199 * 4);
    expect(groups[0].sites).toEqual([...groups[0].sites].sort((a, b) => a - b));
    expect(groups[1]).toMatchObject({ target: "2000", functionId: 9, module: "vmlinux" });
  });
});
