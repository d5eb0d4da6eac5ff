// SPDX-License-Identifier: Apache-2.0
import { describe, expect, it } from "vitest";
import { fnSummary, block, succ } from "../../test/fixtures";
import { flattenTree, hotnessMap, indexCatalog, moduleFunctions, type BlockState, type FlattenOptions } from "./treeModel";

const catalog = [
  fnSummary({ id: 1, name: "vfs_read", address_hex: "ffffffff81234562" }),
  fnSummary({ id: 2, name: "ksys_read", address_hex: "ffffffff81234561" }),
  fnSummary({ id: 3, name: "vfs_readv", address_hex: "ffffffff81300000" }),
  fnSummary({ id: 4, name: "ext4_file_read_iter", module: "ext4", address_hex: "ffffffffc0010000" }),
  fnSummary({ id: 5, name: "VFS_Upper", address_hex: "ffffffff81000000" }),
  fnSummary({ id: 6, name: "af_alg_release", module: "af_alg", address_hex: "ffffffffc0000000" }),
];

const base: FlattenOptions = {
  query: "", sort: "name", hotness: null, collapsedModules: new Set(), expandedFunctions: new Set(), blocks: new Map(),
};

function names(rows: ReturnType<typeof flattenTree>): string[] {
  return rows.map((r) => (r.kind === "module" ? `[${r.name}]` : r.kind === "function" ? r.fn.name : r.kind === "block" ? `+${r.block.offset}` : r.kind === "group" ? `{${r.label}}` : `(${r.text})`));
}

describe("code tree model", () => {
  const index = indexCatalog(catalog);

  it("puts vmlinux first, then modules alphabetically, all expanded at level 1", () => {
    const rows = flattenTree(index, base);
    expect(rows.filter((r) => r.kind === "module").map((r) => (r.kind === "module" ? r.name : ""))).toEqual(["vmlinux", "af_alg", "ext4"]);
    expect(rows[0]).toMatchObject({ kind: "module", level: 1, expanded: true, total: 4, posinset: 1, setsize: 3 });
    expect(rows[1]).toMatchObject({ kind: "function", level: 2, posinset: 1, setsize: 4 });
  });

  it("filters by case-insensitive substring and hides modules without matches", () => {
    expect(names(flattenTree(index, { ...base, query: "VFS_READ" }))).toEqual(["[vmlinux]", "vfs_read", "vfs_readv"]);
    expect(names(flattenTree(index, { ...base, query: "vfs" }))).toEqual(["[vmlinux]", "VFS_Upper", "vfs_read", "vfs_readv"]);
    const rows = flattenTree(index, { ...base, query: "read" });
    expect(rows.find((r) => r.kind === "module" && r.name === "ext4")).toMatchObject({ shown: 1, total: 1 });
    expect(flattenTree(index, { ...base, query: "no_such_function" })).toEqual([]);
  });

  it("sorts by address using the hex strings, where JSON numbers would tie", () => {
    const rows = flattenTree(index, { ...base, sort: "address" });
    expect(names(rows).slice(0, 5)).toEqual(["[vmlinux]", "VFS_Upper", "ksys_read", "vfs_read", "vfs_readv"]);
  });

  it("sorts by live hotness, hottest first, idle functions by name, and reports rates", () => {
    const hot = hotnessMap([{ function_id: 3, samples_per_sec: 2.5 }, { function_id: 1, samples_per_sec: 40 }]);
    const fns = moduleFunctions(index, "vmlinux", "", "hotness", hot);
    expect(fns.map((f) => f.name)).toEqual(["vfs_read", "vfs_readv", "VFS_Upper", "ksys_read"]);
    const rows = flattenTree(index, { ...base, sort: "hotness", hotness: hot });
    expect(rows.find((r) => r.kind === "function" && r.fn.id === 2)).toMatchObject({ samplesPerSec: 0 });
    expect(rows.find((r) => r.kind === "function" && r.fn.id === 1)).toMatchObject({ samplesPerSec: 40 });
  });

  it("hides the functions of a collapsed module", () => {
    const rows = flattenTree(index, { ...base, collapsedModules: new Set(["vmlinux"]) });
    expect(names(rows)).toEqual(["[vmlinux]", "[af_alg]", "af_alg_release", "[ext4]", "ext4_file_read_iter"]);
    expect(rows[0]).toMatchObject({ expanded: false });
  });

  it("shows an expanded function's blocks by offset, or its loading and error states", () => {
    const blocks = new Map<number, BlockState>([
      [1, { status: "ready", blocks: [block(8, 4, [succ("return", null)]), block(0, 8, [succ("fallthrough", 8)])], samples: new Map([[8, 17]]) }],
      [3, { status: "error", message: "Function not found" }],
    ]);
    const rows = flattenTree(index, { ...base, query: "vfs_read", expandedFunctions: new Set([1, 2, 3]), blocks });
    expect(names(rows)).toEqual(["[vmlinux]", "vfs_read", "+0", "+8", "vfs_readv", "(Function not found)"]);
    expect(rows[2]).toMatchObject({ kind: "block", level: 3, samples: 0, posinset: 1, setsize: 2 });
    expect(rows[3]).toMatchObject({ samples: 17 });
    expect(rows[5]).toMatchObject({ kind: "status", error: true });
    const loading = flattenTree(index, { ...base, query: "ksys", expandedFunctions: new Set([2]) });
    expect(names(loading)).toEqual(["[vmlinux]", "ksys_read", "(loading blocks…)"]);
  });

  it("flattens and searches a whole kernel's catalog (speed: bench/console_tree)", () => {
    const big = Array.from({ length: 120_000 }, (_, i) =>
      fnSummary({ id: i + 1, name: `fn_${(i * 7919) % 120_000}`, address_hex: (0xffffffff81000000n + BigInt(i * 64)).toString(16) }));
    const idx = indexCatalog(big);
    const all = flattenTree(idx, base);
    const some = flattenTree(idx, { ...base, query: "fn_1199" });
    expect(all.length).toBe(120_001);
    expect(some.map((r) => (r.kind === "function" ? r.fn.name : "")).filter(Boolean).every((n) => n.includes("fn_1199"))).toBe(true);
    expect(some.length).toBeGreaterThan(1);
  });
});
