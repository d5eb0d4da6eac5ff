// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import { fnSummary, block, succ } from "../../test/fixtures";
import {
  compileQuery,
  flattenTree,
  hotnessMap,
  indexCatalog,
  moduleFunctions,
  stubGroupOf,
  summariesFromPieces,
  type BlockState,
  type FlattenOptions,
} from "./treeModel";

const catalog = [
  fnSummary({ id: 1, name: "vfs_read", address_hex: "ffffffff81234562" }),
  fnSummary({ id: 2, name: "ksys_read", address_hex: "ffffffff81234561" }),
  fnSummary({ id: 3, name: "vfs_readv", address_hex: "ffffffff81300000" }),
  fnSummary({ id: 4, name: "ext4_file_read_iter", module: "ext4", address_hex: "ffffffffc0010000" }),
  fnSummary({ id: 5, name: "VFS_Upper", address_hex: "ffffffff81000000" }),
  fnSummary({ id: 6, name: "af_alg_release", module: "af_alg", address_hex: "ffffffffc0000000" }),
];

const base: FlattenOptions = {
  query: "",
  sort: "name",
  hotness: null,
  collapsedModules: new Set(),
  expandedFunctions: new Set(),
  blocks: new Map(),
};

function names(rows: ReturnType<typeof flattenTree>): string[] {
  return rows.map((r) =>
    r.kind === "module"
      ? `[${r.name}]`
      : r.kind === "function"
        ? r.fn.name
        : r.kind === "block"
          ? `+${r.block.offset}`
          : r.kind === "group"
            ? `{${r.label}}`
            : `(${r.text})`,
  );
}

describe("code tree model", () => {
  const index = indexCatalog(catalog);

  it("puts vmlinux first, then modules alphabetically, all expanded at level 1", () => {
    const rows = flattenTree(index, base);
    expect(rows.filter((r) => r.kind === "module").map((r) => (r.kind === "module" ? r.name : ""))).toEqual([
      "vmlinux",
      "af_alg",
      "ext4",
    ]);
    expect(rows[0]).toMatchObject({ kind: "module", level: 1, expanded: true, total: 4, posinset: 1, setsize: 3 });
    expect(rows[1]).toMatchObject({ kind: "function", level: 2, posinset: 1, setsize: 4 });
  });

  it("filters by case-insensitive substring and hides modules without matches", () => {
    expect(names(flattenTree(index, { ...base, query: "VFS_READ" }))).toEqual(["[vmlinux]", "vfs_read", "vfs_readv"]);
    expect(names(flattenTree(index, { ...base, query: "vfs" }))).toEqual([
      "[vmlinux]",
      "VFS_Upper",
      "vfs_read",
      "vfs_readv",
    ]);
    const rows = flattenTree(index, { ...base, query: "read" });
    expect(rows.find((r) => r.kind === "module" && r.name === "ext4")).toMatchObject({ shown: 1, total: 1 });
    expect(flattenTree(index, { ...base, query: "no_such_function" })).toEqual([]);
  });

  it("sorts by address using the hex strings, where JSON numbers would tie", () => {
    const rows = flattenTree(index, { ...base, sort: "address" });
    expect(names(rows).slice(0, 5)).toEqual(["[vmlinux]", "VFS_Upper", "ksys_read", "vfs_read", "vfs_readv"]);
  });

  it("sorts by live hotness, hottest first, idle functions by name, and reports rates", () => {
    const hot = hotnessMap([
      { function_id: 3, samples_per_sec: 2.5 },
      { function_id: 1, samples_per_sec: 40 },
    ]);
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
      [
        1,
        {
          status: "ready",
          blocks: [block(8, 4, [succ("return", null)]), block(0, 8, [succ("fallthrough", 8)])],
          samples: new Map([[8, 17]]),
        },
      ],
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
      fnSummary({
        id: i + 1,
        name: `fn_${(i * 7919) % 120_000}`,
        address_hex: (0xffffffff81000000n + BigInt(i * 64)).toString(16),
      }),
    );
    const idx = indexCatalog(big);
    const all = flattenTree(idx, base);
    const some = flattenTree(idx, { ...base, query: "fn_1199" });
    expect(all.length).toBe(120_001);
    expect(
      some
        .map((r) => (r.kind === "function" ? r.fn.name : ""))
        .filter(Boolean)
        .every((n) => n.includes("fn_1199")),
    ).toBe(true);
    expect(some.length).toBeGreaterThan(1);
  });

  it("searches by glob, by /regular expression/ and by address", () => {
    expect(names(flattenTree(index, { ...base, query: "vfs_read*" }))).toEqual(["[vmlinux]", "vfs_read", "vfs_readv"]);
    expect(names(flattenTree(index, { ...base, query: "?sys_read" }))).toEqual(["[vmlinux]", "ksys_read"]);
    expect(names(flattenTree(index, { ...base, query: "/^(ksys|ext4)_/" }))).toEqual([
      "[vmlinux]",
      "ksys_read",
      "[ext4]",
      "ext4_file_read_iter",
    ]);
    // Each fixture function is 64 bytes: the last byte of vfs_read finds it (ksys_read ends one byte earlier),
    // one past its end finds nothing.
    expect(names(flattenTree(index, { ...base, query: "0xffffffff812345a1" }))).toEqual(["[vmlinux]", "vfs_read"]);
    expect(names(flattenTree(index, { ...base, query: "ffffffff812345a2" }))).toEqual([]);
    expect(compileQuery("/[/")).toMatchObject({ kind: "invalid" });
    expect(flattenTree(index, { ...base, query: "/[/" })).toEqual([]);
    expect(compileQuery("vfs")).toEqual({ kind: "substring", text: "vfs" });
    expect(compileQuery("  ")).toEqual({ kind: "all" });
  });

  it("filters to hot functions and sorts by size, blocks or in reverse", () => {
    const hot = hotnessMap([{ function_id: 3, samples_per_sec: 2.5 }]);
    expect(names(flattenTree(index, { ...base, hotness: hot, hotOnly: true }))).toEqual(["[vmlinux]", "vfs_readv"]);
    const sized = indexCatalog([
      fnSummary({ id: 1, name: "a", size: 10, block_count: 9 }),
      fnSummary({ id: 2, name: "b", size: 30, block_count: 1 }),
    ]);
    expect(moduleFunctions(sized, "vmlinux", "", "size", null).map((f) => f.name)).toEqual(["b", "a"]);
    expect(moduleFunctions(sized, "vmlinux", "", "size", null, false).map((f) => f.name)).toEqual(["a", "b"]);
    expect(moduleFunctions(sized, "vmlinux", "", "blocks", null).map((f) => f.name)).toEqual(["a", "b"]);
    expect(moduleFunctions(sized, "vmlinux", "", "name", null, true).map((f) => f.name)).toEqual(["b", "a"]);
  });

  it("groups static-call trampolines and similar stubs under a collapsed row", () => {
    expect(stubGroupOf("__SCT__preempt_schedule")).toBe("static_call");
    expect(stubGroupOf("__probestub_sched_switch")).toBe("tracepoint");
    expect(stubGroupOf("__x86_indirect_thunk_rax")).toBe("thunk");
    expect(stubGroupOf("vfs_read")).toBeNull();
    const withStubs = indexCatalog([
      ...catalog,
      fnSummary({ id: 7, name: "__SCT__a" }),
      fnSummary({ id: 8, name: "__SCT__b" }),
    ]);
    const rows = flattenTree(withStubs, { ...base, expandedGroups: new Set() });
    const group = rows.find((r) => r.kind === "group");
    expect(group).toMatchObject({ label: "static-call trampolines", count: 2, expanded: false, level: 2 });
    expect(names(rows).filter((n) => n.startsWith("__SCT__"))).toEqual([]);
    const open = flattenTree(withStubs, {
      ...base,
      expandedGroups: new Set(["vmlinux:static_call"]),
      expandedFunctions: new Set([7]),
    });
    expect(open.filter((r) => r.kind === "function" && r.fn.name.startsWith("__SCT__")).map((r) => r.level)).toEqual([
      3, 3,
    ]);
    expect(open.find((r) => r.kind === "status" && r.fnId === 7)).toMatchObject({ level: 4 });
  });

  it("builds exact addresses from catalog pieces and the host's module bases", () => {
    const fns = summariesFromPieces(
      [
        {
          module: "vmlinux",
          ids: [5, 6],
          names: ["a", "b"],
          offsets: [0x1000, 0x1234567],
          sizes: [16, 32],
          block_counts: [1, 2],
          undecodable: [1],
        },
      ],
      new Map([["vmlinux", "ffffffff81000000"]]),
    );
    expect(fns.map((f) => [f.id, f.address_hex, f.undecodable])).toEqual([
      [5, "ffffffff81001000", false],
      [6, "ffffffff82234567", true],
    ]);
  });
});
