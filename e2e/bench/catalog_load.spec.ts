// SPDX-License-Identifier: Apache-2.0
// bench/catalog_load: the code tree of this host's whole kernel, opened cold (empty browser cache) and
// warm (a second visit), in Chromium. Prints bytes transferred (all resources, and the catalog pieces
// alone) and the time from navigation start until the tree shows the catalog's functions; and, for
// scale, the size of the whole-catalog JSON list the console used to download on every visit.
import { test, expect, type Page } from "@playwright/test";
import { readyHost } from "../tests/helpers";

interface Load {
  ms: number;
  total: number;
  catalog: number;
  catalogBody: number;
}

async function openTree(page: Page, url: string, count: string): Promise<Load> {
  await page.goto(url);
  const ms = await page.waitForFunction(
    (c) => {
      const tree = document.querySelector('[role="tree"]');
      const rows = document.querySelectorAll('[role="treeitem"]').length;
      return tree && rows > 1 && document.body.textContent!.includes(`${c} functions`) ? performance.now() : 0;
    },
    count,
    { timeout: 120_000, polling: 10 },
  );
  const entries = await page.evaluate(() => {
    const res = performance.getEntriesByType("resource") as PerformanceResourceTiming[];
    const nav = performance.getEntriesByType("navigation") as PerformanceNavigationTiming[];
    return [...res, ...nav].map((e) => ({ name: e.name, transfer: e.transferSize, body: e.decodedBodySize }));
  });
  const catalogs = entries.filter((e) => e.name.includes("/api/v1/catalogs/"));
  return {
    ms: await ms.jsonValue(),
    total: entries.reduce((n, e) => n + e.transfer, 0),
    catalog: catalogs.reduce((n, e) => n + e.transfer, 0),
    catalogBody: catalogs.reduce((n, e) => n + e.body, 0),
  };
}

const kb = (n: number) => `${(n / 1024).toFixed(0)} KiB`;

test("catalog load, cold and warm", async ({ page, context }) => {
  const { ctx, hostId } = await readyHost();
  const host = await (await ctx.get(`/api/v1/hosts/${hostId}`)).json();
  const count = host.function_count.toLocaleString("en-US");
  const url = `/hosts/${hostId}?tab=code`;
  // Warm up the backend's catalog cache, so "cold" measures the browser, not the first database read.
  const mods = await (await ctx.get(`/api/v1/hosts/${hostId}/modules`)).json();
  for (const m of mods) await ctx.get(`/api/v1/catalogs/${m.digest}`);
  await context.clearCookies();
  const cold = await openTree(page, url, count);
  const warm = await openTree(page, url, count);
  expect(warm.catalog).toBe(0);
  const raw = await ctx.get(`/api/v1/hosts/${hostId}/functions?limit=100000&sort=address`, {
    headers: { "Accept-Encoding": "identity" },
  });
  const oldBytes = (await raw.body()).length;
  console.log(`catalog_load functions: ${host.function_count} in ${mods.length} piece(s)`);
  console.log(
    `catalog_load cold: ${kb(cold.total)} transferred (catalog ${kb(cold.catalog)} gzip of ${kb(cold.catalogBody)} JSON), tree usable ${Math.round(cold.ms)} ms after navigation start`,
  );
  console.log(
    `catalog_load warm: ${kb(warm.total)} transferred (catalog ${kb(warm.catalog)}: from the browser's cache), tree usable ${Math.round(warm.ms)} ms after navigation start`,
  );
  console.log(
    `catalog_load before: the whole-catalog list the console fetched on every visit is ${kb(oldBytes)} of JSON`,
  );
  console.log(
    `catalog_load: ${host.function_count} functions, cold ${kb(cold.total)} in ${Math.round(cold.ms)} ms, warm ${kb(warm.total)} in ${Math.round(warm.ms)} ms`,
  );
});
