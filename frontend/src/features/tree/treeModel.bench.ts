// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
// How long the code tree takes to index a whole kernel's catalog and to re-flatten it on each
// keystroke of a search: run with bench/console_tree. Synthetic catalogs the size of this project's
// test kernel (61,701 functions) and twice that.
import { bench, describe } from "vitest";
import { fnSummary } from "../../test/fixtures";
import { flattenTree, indexCatalog, type FlattenOptions } from "./treeModel";

const base: FlattenOptions = {
  query: "", sort: "name", hotness: null, collapsedModules: new Set(), expandedFunctions: new Set(), blocks: new Map(),
};

function catalogOf(n: number) {
  return Array.from({ length: n }, (_, i) =>
    fnSummary({ id: i + 1, name: `fn_${(i * 7919) % n}`, address_hex: (0xffffffff81000000n + BigInt(i * 64)).toString(16) }));
}

for (const n of [61_701, 123_402]) {
  const catalog = catalogOf(n);
  const index = indexCatalog(catalog);
  describe(`${n} functions`, () => {
    bench("index the catalog", () => { indexCatalog(catalog); });
    bench("flatten, sorted by name", () => { flattenTree(index, base); });
    bench("flatten, search 'fn_1199'", () => { flattenTree(index, { ...base, query: "fn_1199" }); });
  });
}
