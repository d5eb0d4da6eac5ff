// SPDX-License-Identifier: Apache-2.0
// bench/flame: the flame graph of the host and range bench/flame.py seeded (HOTPATH_FLAME_HOST, _FROM,
// _TO), opened in Chromium twice (the second visit with the console's code in the browser's cache):
// time from navigation start until the canvas is drawn, and every main-thread task over 50 ms
// (a long-task PerformanceObserver). Signs in by itself: it runs without the setup project, whose
// wait for this machine's catalog the seeded host does not need.
import { test, expect } from "@playwright/test";

declare global {
  interface Window {
    __longtasks: number[];
  }
}

test.use({ storageState: { cookies: [], origins: [] } });

test("flame graph of a seeded hour", async ({ page }) => {
  test.setTimeout(600_000);
  const host = process.env.HOTPATH_FLAME_HOST!;
  const from = process.env.HOTPATH_FLAME_FROM!;
  const to = process.env.HOTPATH_FLAME_TO!;
  await page.goto("/");
  await page.getByLabel("Username").fill("admin");
  await page.getByLabel("Password").fill(process.env.HOTPATH_E2E_ADMIN_PASSWORD!);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Hosts" })).toBeVisible();
  await page.addInitScript(() => {
    window.__longtasks = [];
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) window.__longtasks.push(e.duration);
    }).observe({ type: "longtask", buffered: true });
  });
  const drawn: number[] = [];
  const longest: number[] = [];
  for (let round = 0; round < 2; round++) {
    await page.goto(`/hosts/${encodeURIComponent(host)}?tab=flame&from=${from}&to=${to}`);
    // The canvas says how many cells it drew once it has drawn them.
    const ms = await page.waitForFunction(
      () => {
        const c = document.querySelector('[data-testid="flame-canvas"]') as HTMLCanvasElement | null;
        return c && Number(c.dataset.cells) > 1 ? performance.now() : 0;
      },
      undefined,
      { timeout: 300_000, polling: "raf" },
    );
    drawn.push(Math.round(await ms.jsonValue()));
    await page.waitForTimeout(500); // tasks that end after the first drawing (labels, tooltips) count too
    longest.push(Math.round(await page.evaluate(() => Math.max(0, ...window.__longtasks))));
    const cells = await page.getByTestId("flame-canvas").getAttribute("data-cells");
    console.log(
      `flame round ${round + 1}: drawn ${drawn[round]} ms after navigation start, ${cells} cells, longest task ${longest[round]} ms`,
    );
  }
  console.log(`flame drawn: ${drawn[1]} ms (second visit)`);
  console.log(`flame longest task: ${Math.max(...longest)} ms (both visits)`);
});
