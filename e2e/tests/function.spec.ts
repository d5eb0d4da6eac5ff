// SPDX-License-Identifier: Apache-2.0
// The code-resource tree and the function view against the live kernel: searching finds
// vfs_read, its CFG draws one node per basic block the agent found, and a block's instructions
// come from the agent.
import { test, expect } from "@playwright/test";
import { api, openHost, readyHost, startReadLoop, thisHostId, ANSWER_MS } from "./helpers";

/** This host, once its catalog is stored, and vfs_read as the API lists it. */
async function vfsRead() {
  const { ctx, hostId } = await readyHost();
  const found = await (await ctx.get(`/api/v1/hosts/${hostId}/functions?q=vfs_read&limit=50`)).json();
  const fn = found.items.find((f: { name: string }) => f.name === "vfs_read");
  expect(fn, "vfs_read is in the catalog").toBeTruthy();
  return { ctx, hostId, fn };
}

test("searching vfs_read finds it in the tree and its CFG draws", async ({ page }) => {
  const { fn } = await vfsRead();

  await openHost(page);
  await page.getByRole("tab", { name: "Code" }).click();
  await page.getByRole("searchbox", { name: "Search functions" }).fill("vfs_read");
  const item = page.getByRole("treeitem", { name: /\bvfs_read\b/ }).first();
  await expect(item).toBeVisible();
  await item.getByRole("link", { name: "vfs_read", exact: true }).click();

  await expect(page.getByRole("heading", { name: "vfs_read" })).toBeVisible();
  const cfg = page
    .getByRole("img", { name: "Control-flow graph" })
    .or(page.locator('svg[aria-label="Control-flow graph"]'));
  await expect(cfg.first()).toBeVisible();
  await expect(page.getByTestId("cfg-block")).toHaveCount(fn.block_count);

  // The entry block's label carries the function's address (hex from the API: kernel addresses
  // exceed 2^53, so a JSON number would lose its low bits in JavaScript).
  const entry = page.getByTestId("cfg-block").filter({ hasText: fn.address_hex });
  await expect(entry.first()).toBeAttached();

  // Clicking a block shows its instructions, decoded by the agent. (The first view may centre on the
  // hottest region; the Entry button brings the entry block into view.)
  await page.getByRole("button", { name: "Entry" }).click();
  await page.getByTestId("cfg-block").first().click();
  const panel = page.getByRole("region", { name: "Instructions" });
  await expect(panel).toBeVisible();
  await expect(panel).toContainText(fn.address_hex, { timeout: ANSWER_MS });
});

test("vfs_read's CFG is coloured by live samples while a read loop runs", async ({ page }) => {
  const { ctx, hostId, fn } = await vfsRead();

  const loop = startReadLoop();
  try {
    await page.goto(`/hosts/${hostId}/functions/${fn.id}`);
    await expect(page.getByRole("heading", { name: "vfs_read" })).toBeVisible();
    // A block with samples says so in its tooltip and is filled differently from a block without.
    const hot = page.getByTestId("cfg-block").filter({ has: page.locator("title", { hasText: /^[1-9]\d* samples$/ }) });
    await expect(hot.first()).toBeAttached({ timeout: ANSWER_MS });
    const cold = page.getByTestId("cfg-block").filter({ has: page.locator("title", { hasText: /^0 samples$/ }) });
    if (await cold.count()) {
      const fill = (l: typeof hot) => l.first().locator("rect").getAttribute("fill");
      expect(await fill(hot)).not.toBe(await fill(cold));
    }
    // The colours come from the same samples the API reports for this function.
    const samples = await (await ctx.get(`/api/v1/hosts/${hostId}/functions/${fn.id}/samples?window_s=60`)).json();
    expect(samples.total).toBeGreaterThan(0);
  } finally {
    loop.kill();
  }
});

test("an unknown function shows a not-found page", async ({ page }) => {
  const ctx = await api();
  const hostId = await thisHostId(ctx);
  await page.goto(`/hosts/${hostId}/functions/999999999`);
  await expect(page.getByText("Function not found")).toBeVisible();
});
