// SPDX-License-Identifier: Apache-2.0
// Measurement of the live kernel from the console: vfs_read with its blocks, counted while `dd` reads
// one byte per read(2). This kernel forbids kprobes and fentry, so the agent counts the blocks by PC
// sampling (labelled sampled) and derives the edges from those sample counts (labelled sampled
// estimates); vfs_read's CFG shows the block heat and the edges with those labels.
import { test, expect } from "@playwright/test";
import { readyHost, startReadLoop, ANSWER_MS } from "./helpers";

test("vfs_read measured on the kernel shows sampled block heat and estimated edges on its CFG", async ({ page }) => {
  test.setTimeout(180_000);
  const { ctx, hostId } = await readyHost();
  const loop = startReadLoop();
  let mid: string | null = null;
  try {
    await page.goto(`/hosts/${encodeURIComponent(hostId)}/measure?target=kernel`);
    await page.getByLabel("Find functions").fill("vfs_read");
    await page.getByLabel("Select vfs_read", { exact: true }).check();
    await expect(page.getByLabel("Blocks of vfs_read")).toBeChecked();
    for (const m of ["Wall time", "Virtual time (on CPU)"]) await page.getByLabel(m, { exact: true }).uncheck();
    await expect(page.getByLabel("Count", { exact: true })).toBeChecked();
    await page.getByRole("button", { name: "Start" }).click();
    await expect(page.getByRole("status", { name: "Start command" })).toContainText("done", { timeout: 60_000 });
    await expect(page).toHaveURL(/[?&]m=/);
    mid = new URL(page.url()).searchParams.get("m");
    await expect(page.getByLabel("Measurement state")).toHaveText(/armed|running/, { timeout: ANSWER_MS });
    const fn = page.getByRole("table", { name: "Measured values" }).locator("tr[data-resource='vfs_read']").first();
    await expect(fn.locator("td[data-metric='count']")).toContainText("sampled", { timeout: ANSWER_MS });

    await fn.getByRole("link", { name: "CFG of vfs_read" }).click();
    await expect(page.getByRole("heading", { name: "vfs_read", level: 1 })).toBeVisible();
    await expect(page.getByTestId("measurement-range")).toContainText("blocks sampled", { timeout: ANSWER_MS });
    // Block heat: some blocks have samples, labelled sampled (and never called executions).
    const hot = page.locator("[data-testid=cfg-block]").filter({ hasText: /[1-9][\d,]* samples · sampled/ });
    await expect.poll(() => hot.count(), { timeout: 60_000 }).toBeGreaterThan(0);
    await expect(page.locator("[data-testid=cfg-block]").filter({ hasText: "executions" })).toHaveCount(0);
    // Derived edges: drawn with their counts, every one a sampled estimate.
    const edges = page.locator("[data-testid=cfg-edge-count]");
    await expect.poll(() => edges.count(), { timeout: 60_000 }).toBeGreaterThan(0);
    const labels = await edges.evaluateAll((els) => [...new Set(els.map((e) => e.getAttribute("data-label")))]);
    expect(labels).toEqual(["sampled estimate"]);
    await expect(page.getByTestId("measurement-range")).toContainText("edges sampled estimates");
    await expect(page.getByLabel("Measurement legend")).toContainText("sampled PC counts");
  } finally {
    loop.kill();
    if (mid) await ctx.post(`/api/v1/hosts/${encodeURIComponent(hostId)}/measurements/${encodeURIComponent(mid)}/stop`);
  }
});
