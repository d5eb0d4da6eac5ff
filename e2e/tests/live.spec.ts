// SPDX-License-Identifier: Apache-2.0
// Live hotness from real PC sampling: a read loop the test runs makes the kernel's read path
// climb the top-functions view; killing the agent shows the host offline with its data kept, and
// the restarted agent brings it back online.
import { test, expect } from "@playwright/test";
import { api, agentPid, hostname, openHost, readyHost, startReadLoop } from "./helpers";

const READ_PATH = ["vfs_read", "ksys_read", "__x64_sys_read", "read_iter_zero", "iov_iter_zero", "rw_verify_area"];

async function bestReadPathRank(ctx: Awaited<ReturnType<typeof api>>, hostId: string): Promise<number> {
  const top = await (await ctx.get(`/api/v1/hosts/${hostId}/top-functions?window_s=5&limit=100`)).json();
  const i = top.items.findIndex((f: { name: string }) => READ_PATH.includes(f.name));
  return i < 0 ? Infinity : i + 1;
}

test("a read loop makes the kernel's read path climb the top functions", async ({ page }) => {
  const { ctx, hostId } = await readyHost();
  // Start from a quiet read path (an earlier test's read loop may still be inside the window).
  await expect.poll(() => bestReadPathRank(ctx, hostId), { timeout: 30_000 }).toBeGreaterThan(10);

  await openHost(page);
  await page.getByRole("tab", { name: "Top functions" }).click();
  const table = page.getByRole("table", { name: "Top functions" });
  await expect(table).toBeVisible();

  const loop = startReadLoop();
  try {
    const readRow = table.getByRole("row").filter({ hasText: new RegExp(`\\b(${READ_PATH.join("|")})\\b`) });
    // The table refreshes itself as batches arrive (every few seconds); a loaded machine makes the
    // agent's batches and the page's rendering late, so the bound is a hang bound, not a speed check.
    await expect(readRow.first()).toBeVisible({ timeout: 90_000 });
    await expect.poll(() => bestReadPathRank(ctx, hostId), { timeout: 90_000 }).toBeLessThanOrEqual(10);
  } finally {
    loop.kill();
  }
});

test("a dead agent shows the host offline, keeps its data, and the restarted agent reconnects", async ({ page }) => {
  const { ctx, hostId } = await readyHost();
  const pid = agentPid();
  process.kill(pid, "SIGKILL");

  await page.goto("/");
  const row = page.getByRole("row").filter({ hasText: hostname });
  await expect(row).toContainText(/offline/i, { timeout: 20_000 });
  // Data is kept: the tree still answers while the host is offline.
  const found = await (await ctx.get(`/api/v1/hosts/${hostId}/functions?q=vfs_read&limit=5`)).json();
  expect(found.total).toBeGreaterThan(0);

  // scripts/run.sh restarts the agent; it reconnects and the host is online again.
  await expect(row).toContainText(/online/i, { timeout: 60_000 });
  expect(agentPid()).not.toBe(pid);
});
